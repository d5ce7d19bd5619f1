"""Smoke test of quinn's connection shim: client and server over a fixed 5 ms one-way
path (no loss, no bottleneck), 1 MB from client to server, in virtual time.
Usage: python3 tests/connection/quinn_smoke.py LIB [cc] [bytes]"""
import hashlib
import heapq
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ccdiff.connection.shim import open_shim  # noqa: E402

lib = Path(sys.argv[1])
cc = sys.argv[2] if len(sys.argv) > 2 else "cubic"
total = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
inc = Path(__file__).resolve().parents[2] / "implementations" / "include" / "connection"
opts = f"mds=1350;cert={inc / 'cert.pem'};key={inc / 'key.pem'};cc={cc}"
new = open_shim(lib)
eps = [new(False, 0, 1, opts), new(True, 0, 1, opts)]
DELAY = 5_000
heap, seq, now, accepted, log = [], 0, 0, 0, hashlib.sha256()
sent = [0, 0]
lines = []


def settle(now):
    global seq, accepted
    if accepted < total:
        accepted += eps[0].write(total - accepted, True, now)
    got = eps[1].read(now)
    for who in (0, 1):
        while (d := eps[who].send(now)) is not None:
            data, at = d
            seq += 1
            sent[who] += 1
            log.update(f"{who} {len(data)} {max(now, at)}\n".encode())
            heapq.heappush(heap, (max(now, at) + DELAY, seq, 1 - who, data))
    return got


got = settle(0)
events = 0
while True:
    timers = [ep.timeout(now) for ep in eps]
    cands = [t for t in (heap[0][0] if heap else None, *timers) if t is not None]
    if not cands:
        print("deadlock")
        break
    now = max(min(cands), now)
    events += 1
    if heap and heap[0][0] <= now:
        _, _, who, data = heapq.heappop(heap)
        eps[who].recv(data, now)
    else:
        who = 0 if timers[0] is not None and timers[0] <= now else 1
        eps[who].on_timeout(now)
    got = settle(now)
    st = eps[0].stats()
    line = (now, st["cwnd"], st["bytes_in_flight"], st["in_recovery"])
    if not lines or lines[-1][1:] != line[1:]:
        lines.append(line)
    if eps[1].stats()["stream_fin_read"]:
        break
    if now > 60_000_000:
        print("timeout")
        break
c, s = eps[0].stats(), eps[1].stats()
print(f"cc={cc} bytes={total} completion_us={now} events={events} datagrams c->s={sent[0]} s->c={sent[1]}")
print(f"client: cwnd={c['cwnd']} ssthresh={c['ssthresh']} bif={c['bytes_in_flight']} srtt={c['smoothed_rtt_us']} "
      f"min_rtt={c['min_rtt_us']} latest={c['latest_rtt_us']} sent={c['packets_sent']} lost={c['packets_lost']} "
      f"bytes_sent={c['bytes_sent']} cong={c['congestion_events']} rec={c['in_recovery']} est={c['established']}")
print(f"server: read={s['stream_bytes_read']} fin={s['stream_fin_read']} est={s['established']} sent={s['packets_sent']}")
print(f"cwnd trajectory: {len(lines)} changes, first {lines[:4]}, last {lines[-2:]}")
print("wire digest (sizes, times):", log.hexdigest()[:16])
for ep in eps:
    ep.close()
