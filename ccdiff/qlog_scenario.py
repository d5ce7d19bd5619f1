"""A closed-loop scenario from a real connection: its losses and delays become the
simulator's schedule, so one real connection's network conditions run against every stack.

    ccdiff import tests/fixtures/qlog/aioquic-cubic-blackout.qlog --scenario real.toml
    ccdiff sim real.toml --stack quiche@0.30.0

From the imported trace (the application data space, times from the first packet sent):

- ``base_rtt_us``: the smallest RTT sample (the stack's own, an ACK's ``rtt``, where the
  log gave it) less its reported ack delay; ``jitter_us``: the
  90th percentile of those samples above it (what the path added to the ACK's return);
- ``loss_schedule``: per BIN_US of send time, the share of the packets sent in it that the
  connection declared lost (a packet later acknowledged, a spurious loss, is not counted),
  as ``[[until_us, rate], ...]``; a bin where every packet sent was lost is a ``blackouts``
  window instead (the simulator's rate must stay below 1);
- ``app``: ``bulk`` of the bytes acknowledged, or ``bursts`` when the sender went idle (no
  packet in flight and nothing sent for IDLE_GAP_US or more): that many bursts of the mean
  bytes each, one every mean period between their starts;
- ``rate_bytes_per_s``: twice the connection's peak delivery rate (acknowledged bytes over
  any window of 4 x min_rtt), at least 1 MB/s: a loopback relay has no bottleneck of its
  own, so the path is made faster than the connection ever went;
- ``deadline_us``: four times the connection's duration, at least 2 s.

- ``reorder_rate`` / ``reorder_delay_us``: the share of packets declared lost and then
  acknowledged (late, not lost), and how much longer than min_rtt they took on average.
"""
from __future__ import annotations

from collections import deque

from .ledger import Ledger
from .trace import Ack, Lost, Sent

BIN_US = 100_000
IDLE_GAP_US = 100_000


def derive(trace, name: str, source: str) -> dict:
    """Scenario fields (flat, as ccdiff/sim/scenario.py's Scenario) from an imported trace."""
    ledger = Ledger(trace.header)
    sends, lost_sent_t, acked = {}, {}, []        # pn -> (t, bytes); lost pn -> send time; (t, bytes)
    samples = []
    late = []                                     # the RTT of each packet declared lost, then acknowledged
    segments = []                                 # [start_t, end_t, acked bytes] per busy period
    in_flight = 0
    last_send = None
    first = None
    for ev in trace.stream():
        kind = type(ev)
        resolved = ledger.resolve(ev)
        if kind is Sent:
            if first is None:
                first = ev.t
            if last_send is None or (in_flight == 0 and ev.t - last_send >= IDLE_GAP_US):
                segments.append([ev.t, ev.t, 0])
            sends[ev.pn] = (ev.t, ev.bytes)
            last_send = ev.t
        elif kind is Ack:
            # the path's share of the sample: the peer's reported ack delay taken out (RFC 9002 §5.3);
            # the stack's own sample where the ACK carries it (`rtt`), else the trace's difference
            sample = resolved.rtt[0] if ev.rtt is None else ev.rtt
            samples.append(sample - min(ev.ack_delay, trace.header.max_ack_delay))
            size = sum(sends[pn][1] for pn in ev.pns if pn in sends)
            for pn in ev.pns:
                if lost_sent_t.pop(pn, None) is not None:    # spurious: it was only late
                    late.append(ev.t - sends[pn][0])
            acked.append((ev.t, size))
            if segments:
                segments[-1][1] = ev.t
                segments[-1][2] += size
        elif kind is Lost:
            for pn in ev.pns:
                lost_sent_t[pn] = sends[pn][0]
        in_flight = resolved.bytes_in_flight_after
    if first is None or not samples:
        from .errors import SetupError
        raise SetupError(f"{source}: no packet sent and acknowledged: no path to derive a scenario from")
    min_rtt = max(2, min(samples))
    samples = [max(x, min_rtt) for x in samples]
    samples.sort()
    jitter = samples[int(0.9 * (len(samples) - 1))] - min_rtt
    end = max(t for t, _ in acked)
    duration = end - first

    # losses by send time, per bin
    n_bins = duration // BIN_US + 1
    sent_per_bin, lost_per_bin = [0] * n_bins, [0] * n_bins
    for t, _ in sends.values():
        sent_per_bin[min((t - first) // BIN_US, n_bins - 1)] += 1
    for t in lost_sent_t.values():
        lost_per_bin[min((t - first) // BIN_US, n_bins - 1)] += 1
    schedule, blackouts = [], []
    for i in range(n_bins):
        until = (i + 1) * BIN_US
        rate = lost_per_bin[i] / sent_per_bin[i] if sent_per_bin[i] else 0.0
        if rate >= 1.0:
            if blackouts and blackouts[-1][1] == i * BIN_US:
                blackouts[-1][1] = until
            else:
                blackouts.append([i * BIN_US, until])
            rate = 0.0
        rate = round(min(rate, 0.99), 3)
        if schedule and schedule[-1][1] == rate:
            schedule[-1][0] = until
        else:
            schedule.append([until, rate])
    while schedule and schedule[-1][1] == 0.0:    # no loss after the last step anyway
        schedule.pop()

    # peak delivery rate over windows of 4 x min_rtt
    window, peak, total = 4 * min_rtt, 0, 0
    recent = deque()
    for t, size in acked:
        recent.append((t, size))
        total += size
        while recent[0][0] <= t - window:
            total -= recent.popleft()[1]
        peak = max(peak, total)
    rate = max(1_000_000, 2 * peak * 1_000_000 // window)

    fields = {"name": name, "max_datagram_size": trace.header.max_datagram_size,
              "initial_rtt_us": trace.header.initial_rtt_us, "base_rtt_us": int(min_rtt),
              "rate_bytes_per_s": int(rate), "queue_bytes": max(int(rate * min_rtt // 1_000_000) * 2,
                                                                 4 * trace.header.max_datagram_size),
              "jitter_us": int(jitter), "loss_schedule": schedule, "blackouts": blackouts,
              "max_ack_delay_us": trace.header.max_ack_delay,
              "deadline_us": max(2_000_000, 4 * duration), "max_stall_us": 0}
    if late:   # reordering: packets declared lost and acknowledged later were held this much longer
        fields.update(reorder_rate=round(len(late) / len(sends), 3),
                      reorder_delay_us=int(max(1, sum(late) // len(late) - min_rtt)))
    delivered = sum(size for _, size in acked)
    if len(segments) > 1:
        starts = [s[0] for s in segments]
        fields.update(app="bursts", bursts=len(segments), bytes=max(1, delivered // len(segments)),
                      period_us=max(1, (starts[-1] - starts[0]) // (len(segments) - 1)))
    else:
        fields.update(app="bulk", bytes=max(1, delivered))
    fields["purpose"] = (f"The network conditions of a real connection ({source}, {trace.n_events} events, "
                         f"{duration / 1000:.0f} ms): min RTT {min_rtt} us, RTT samples up to {jitter} us above "
                         f"it (p90), {len(lost_sent_t)} of {len(sends)} packets lost by send time per "
                         f"{BIN_US // 1000} ms, {len(blackouts)} blackout(s), {len(late)} late (reordered), "
                         f"{fields['app']} of {fields['bytes']} "
                         f"bytes. Made by ccdiff import --scenario (ccdiff/qlog_scenario.py).")
    return fields


def to_toml(fields: dict) -> str:
    """The scenario file, in the catalog's sections (scenarios/README.md)."""
    def value(v):
        if isinstance(v, str):
            return '"""\n' + v.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '\n"""' if "\n" in v or len(v) > 60 \
                else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)
    sections = {
        "connection": ("max_datagram_size", "initial_rtt_us"),
        "path": ("rate_bytes_per_s", "base_rtt_us", "queue_bytes", "jitter_us", "reorder_rate", "reorder_delay_us"),
        "loss": ("loss_schedule", "blackouts"),
        "ack": ("max_ack_delay_us",),
        "app": ("app", "bytes", "bursts", "period_us"),
        "pass": ("deadline_us", "max_stall_us"),
    }
    lines = [f"name = {value(fields['name'])}", f"purpose = {value(fields['purpose'])}", ""]
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        for key in keys:
            if key in fields:
                lines.append(f"{'pattern' if key == 'app' else key} = {value(fields[key])}")
        lines.append("")
    return "\n".join(lines)
