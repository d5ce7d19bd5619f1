"""Helpers shared by the adapter tests: events as dicts, replayed on one stack."""
import json

from ccdiff.replay import replay
from ccdiff.trace import parse_trace_text

MDS = 1200


def sent(t, pn, **extra):
    return dict(t=t, ev="sent", pn=pn, bytes=MDS, **extra)


def run_events(events, spec, mds=MDS):
    """Replay events on one stack; returns (snapshots, findings of that stack)."""
    text = "\n".join([json.dumps({"ccdiff_trace": 1, "max_datagram_size": mds})]
                     + [json.dumps(e) for e in events])
    res = replay(parse_trace_text(text), [spec])
    r = res.runs[spec]
    assert r.error is None, r.error
    assert len(r.snapshots) == len(events)
    return r.snapshots, [f for f in res.findings if f.stack == spec]
