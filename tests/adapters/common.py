"""Helpers shared by the adapter tests: events as dicts, replayed on one stack."""
import json

from ccdiff.replay import replay
from ccdiff.trace import parse_trace_text

MDS = 1200


def sent(t, pn, **extra):
    return dict(t=t, ev="sent", pn=pn, bytes=MDS, **extra)


def run_events(events, spec, mds=MDS, **header):
    """Replay events on one stack; returns (snapshots, findings of that stack).  header: more
    trace header fields (max_ack_delay=...)."""
    text = "\n".join([json.dumps({"ccdiff_trace": 1, "max_datagram_size": mds, **header})]
                     + [json.dumps(e) for e in events])
    res = replay(parse_trace_text(text), [spec])
    r = res.runs[spec]
    assert r.error is None, r.error
    assert len(r.snapshots) == len(events)
    return r.snapshots, [f for f in res.findings if f.stack == spec]


def run_marked(events, spec, mds=MDS, check=False, fmt=1):
    """Replay (t, event dict, mark) rows on one stack; returns ({mark: snapshot}, findings of
    that stack).  The quinn, s2n-quic and aioquic tests name the events they look at."""
    lines = [json.dumps({"ccdiff_trace": fmt, "max_datagram_size": mds})]
    marks = {}
    for i, (t, ev, mark) in enumerate(events):
        lines.append(json.dumps({"t": t, **ev}))
        if mark:
            marks[mark] = i
    res = replay(parse_trace_text("\n".join(lines)), [spec], check=check)
    r = next(iter(res.runs.values()))          # the requested stack comes first
    assert r.error is None, r.error
    return {m: r.snapshots[i] for m, i in marks.items()}, [f for f in res.findings if f.stack == spec]
