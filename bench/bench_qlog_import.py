"""Time and peak memory of `ccdiff import` on a qlog of 1 million events (streaming).

    python3 bench/bench_qlog_import.py [--events 1000000] [--work DIR] [--json FILE]

Writes two qlogs of N events each, deterministically, once: WORK/qlog-N.sqlog (JSON-SEQ,
one record a line, quic: names of the current draft) and WORK/qlog-N.qlog (qlog 0.3 JSON,
the whole document on one line, as aioquic's QuicFileLogger writes it: the case a
line-by-line reader cannot stream).  Events: bench_oracle's stream (ACK-clocked bulk
flow, random loss, idle gaps) as packet_sent / packet_received (one ACK frame) /
packet_lost, a metrics_updated after each ACK.  Each import runs as `python -m ccdiff
import F -o WORK/out.jsonl` in its own child, then `ccdiff replay` of the JSON-SEQ file on
the oracle (a qlog replayed directly: imported twice, validated then streamed); peak RSS
is each child's ru_maxrss (bench_memory.peak).  Goal: memory bounded by the packets in
flight, not the file.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_memory import peak                       # noqa: E402
from bench_oracle import MDS, iter_stream           # noqa: E402
from ccdiff.trace import Ack, Lost, Sent            # noqa: E402

NAMES = {"draft": ("quic:packet_sent", "quic:packet_received", "quic:packet_lost", "quic:recovery_metrics_updated"),
         "0.3": ("transport:packet_sent", "transport:packet_received", "recovery:packet_lost",
                 "recovery:metrics_updated")}


def _ranges(pns) -> list:
    out = []
    for pn in pns:
        if out and out[-1][1] == pn - 1:
            out[-1][1] = pn
        else:
            out.append([pn, pn])
    return out


def qlog_events(n_events: int, schema: str):
    """n_events qlog event dicts (the last metrics_updated may be cut)."""
    sent, received, lost, metrics = NAMES[schema]
    count, cwnd, inflight = 0, 12000, 0
    for ev in iter_stream(n_events):
        kind = type(ev)
        t = ev.t / 1000
        if kind is Sent:
            inflight += ev.bytes
            records = [{"time": t, "name": sent, "data": {"header": {"packet_type": "1RTT",
                        "packet_number": ev.pn}, "frames": [{"frame_type": "stream"}], "raw": {"length": ev.bytes}}}]
        elif kind is Ack:
            inflight -= MDS * len(ev.pns)
            cwnd += MDS
            records = [{"time": t, "name": received, "data": {"header": {"packet_type": "1RTT"},
                        "frames": [{"frame_type": "ack", "acked_ranges": _ranges(ev.pns), "ack_delay": 0.5}]}},
                       {"time": t, "name": metrics, "data": {"congestion_window": cwnd,
                                                              "bytes_in_flight": max(inflight, 0)}}]
        elif kind is Lost:
            inflight -= MDS * len(ev.pns)
            records = [{"time": t, "name": lost, "data": {"header": {"packet_type": "1RTT", "packet_number": pn}}}
                       for pn in ev.pns]
        else:
            continue
        for record in records:
            if count == n_events:
                return
            count += 1
            yield record


def write_qlogs(work: Path, n_events: int) -> tuple:
    seq, doc = work / f"qlog-{n_events}.sqlog", work / f"qlog-{n_events}.qlog"
    if not seq.exists():
        with open(seq.with_suffix(".partial"), "w") as out:
            out.write("\x1e" + json.dumps({"file_schema": "urn:ietf:params:qlog:file:sequential",
                                           "serialization_format": "application/qlog+json-seq",
                                           "trace": {"vantage_point": {"type": "server"}}}) + "\n")
            for record in qlog_events(n_events, "draft"):
                out.write("\x1e" + json.dumps(record, separators=(",", ":")) + "\n")
        seq.with_suffix(".partial").rename(seq)
    if not doc.exists():
        with open(doc.with_suffix(".partial"), "w") as out:
            out.write('{"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{"common_fields": {}, "events": [')
            for i, record in enumerate(qlog_events(n_events, "0.3")):
                out.write(("," if i else "") + json.dumps(record))
            out.write('], "vantage_point": {"name": "bench", "type": "server"}}]}')
        doc.with_suffix(".partial").rename(doc)
    return seq, doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ccdiff-bench-qlog"))
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in write_qlogs(args.work, args.events):
        out = args.work / "out.jsonl"
        r = peak(["import", str(path), "-o", str(out)], ROOT)
        r.update(file=path.name, mb_on_disk=path.stat().st_size / 1e6, events=args.events,
                 trace_lines=sum(1 for _ in open(out)) if out.exists() else 0)
        rows.append(r)
        print(f"{path.name:<26}{r['mb_on_disk']:>8.0f} MB file {r['wall_s']:>7.1f} s {r['peak_mb']:>7.0f} MB peak RSS "
              f"{r['trace_lines']:>9,} trace lines  exit {r['exit']}  {r['stderr'][:100]}")
    seq = write_qlogs(args.work, args.events)[0]
    r = peak(["replay", str(seq), "--stack", "oracle"], ROOT)     # a qlog replayed directly
    r.update(file=f"replay --stack oracle {seq.name}", mb_on_disk=seq.stat().st_size / 1e6, events=args.events,
             trace_lines=0)
    rows.append(r)
    print(f"{r['file']:<26} {r['wall_s']:>7.1f} s {r['peak_mb']:>7.0f} MB peak RSS  exit {r['exit']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["exit"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
