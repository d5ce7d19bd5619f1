"""A finding's minimal trace as a test in the stack's own language (issue 15 point 2).

quiche: a Rust `#[test]` for the tests module of src/recovery/congestion/cubic.rs, written
with quiche's own test harness (`TestSender`, src/recovery/congestion/test_sender.rs:
`send_packet`, `ack_n_packets`, `lose_n_packets`, `update_rtt`, `advance_time`) so that a
maintainer can paste it and see it fail.  TestSender acknowledges and loses packets oldest
first, so a trace maps onto it when every ACK and loss covers the oldest packets still
outstanding and every packet has the same size; otherwise `quiche_test` says why not.

Each event is followed by the invariant's assertion (the one ccdiff's checker makes), so
the test fails at the first event where the controller breaks it.
"""
from __future__ import annotations

import re

from ..trace import Ack, AppData, AppIdle, Lost, PersistentCongestion, Sent

# Assertions after each event, in quiche's terms (Congestion through TestSender's Deref).
ASSERTIONS = {
    "future-recovery-start": (
        "assert!(\n"
        "    sender.congestion_recovery_start_time.map_or(true, |start| start <= sender.time),\n"
        "    \"{where}: recovery start {{:?}} after now\",\n"
        "    sender.congestion_recovery_start_time.map(|start| start - sender.time),\n"
        ");"),
    "cwnd-below-minimum": (
        "assert!(\n"
        "    sender.congestion_window >= 2 * sender.max_datagram_size,\n"
        "    \"{where}: cwnd {{}} below the minimum window\",\n"
        "    sender.congestion_window,\n"
        ");"),
}


class NotExpressible(ValueError):
    """The trace cannot be written with TestSender's oldest-first ACKs and losses."""


def quiche_test(trace, invariant: str, name: str, comment: str = "") -> str:
    """The Rust test, or NotExpressible / KeyError (no assertion for this invariant)."""
    check = ASSERTIONS[invariant]
    sizes = {ev.bytes for ev in trace.events if type(ev) is Sent}
    if len(sizes) != 1:
        raise NotExpressible("packets of different sizes (TestSender sends one size per call)")
    size = sizes.pop()
    if size != trace.header.max_datagram_size:
        raise NotExpressible(f"packets of {size} bytes, not max_datagram_size")
    body, outstanding, sent_at, now = [], [], {}, None
    for index, ev in enumerate(trace.events):
        kind = type(ev)
        if now is not None and ev.t > now:
            body.append(f"sender.advance_time(Duration::from_micros({ev.t - now}));")
        now = ev.t
        line = f"event {index} (t = {ev.t} us)"
        if kind is Sent:
            body.append(f"sender.send_packet(size); // pn {ev.pn}")
            outstanding.append(ev.pn)
            sent_at[ev.pn] = ev.t
        elif kind in (Ack, Lost):
            n = len(ev.pns)
            if list(ev.pns) != outstanding[:n]:
                raise NotExpressible(f"{line}: {kind.__name__.lower()} of {list(ev.pns)} is not the oldest "
                                     f"outstanding packets {outstanding[:n]}")
            del outstanding[:n]
            if kind is Ack:
                # RFC 9002 §5.1: a sample from the largest newly acknowledged packet, taken
                # before the ACK reaches the controller (recovery.rs on_ack_received).
                body.append(f"sender.update_rtt(Duration::from_micros({ev.t - sent_at[ev.pns[-1]]}));")
                body.append(f"sender.ack_n_packets({n}, size); // pn {list(ev.pns)}")
            else:
                body.append(f"sender.lose_n_packets({n}, size, None); // pn {list(ev.pns)}")
        elif kind is PersistentCongestion:
            raise NotExpressible(f"{line}: quiche's LegacyRecovery has no persistent congestion")
        elif kind in (AppIdle, AppData):
            continue     # quiche's controller has no hook for them (docs/adapters.md)
        body.append(check.format(where=line))
    fn = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    lines = [f"    // {text}" for text in (comment or "").splitlines()]
    lines += ["    #[test]", f"    fn {fn}() {{", "        let mut sender = test_sender();",
              "        let size = sender.max_datagram_size;",
              f"        assert_eq!(size, {size});"]
    lines += ["        " + row for stmt in body for row in stmt.splitlines()]
    lines.append("    }")
    return "\n".join(lines) + "\n"


# ---- ngtcp2 ----------------------------------------------------------------------------
#
# ngtcp2: a C function for tests/ngtcp2_cc_test.c (munit: `assert_uint64(a, <=, b)`,
# registered with `munit_void_test(NAME)`).  ngtcp2's CUBIC needs no connection object:
# ngtcp2_conn_stat, ngtcp2_rst and ngtcp2_rtb_entry set up as ngtcp2_conn.c and
# ngtcp2_rtb.c do, which is exactly what ccdiff's adapter does (implementations/ngtcp2/
# adapter.c, its comments cite the conn.c and rtb.c lines).  The trace is a table of
# literal events; a small driver in the test hands them to the controller in the
# adapter's order (send: rst_on_pkt_sent; ACK: reset_rate_sample, update_rate_sample
# per packet ascending, rst_on_ack_recv, the pending loss's congestion_event,
# on_ack_recv; a loss without an ACK in its burst: the loss-timer path).

NGTCP2_SENT, NGTCP2_ACK, NGTCP2_LOST, NGTCP2_APP_IDLE = 1, 2, 3, 4

NGTCP2_DRIVER = r"""
  ngtcp2_conn_stat cstat;
  ngtcp2_rst rst;
  ngtcp2_cc_cubic cubic;
  ngtcp2_log log;
  ngtcp2_cc *cc = &cubic.cc;
  ngtcp2_rtb_entry *ents = calloc({max_pn} + 1, sizeof(*ents));
  int64_t pending[{max_pending}], largest_acked = -1;
  size_t npending = 0, i, j;
  ngtcp2_tstamp pending_ts = 0, ts = 0;
  const ngtcp2_duration initial_rtt = {initial_rtt_us} * NGTCP2_MICROSECONDS;
  const ngtcp2_tstamp base = {base_us} * NGTCP2_MICROSECONDS;
  ngtcp2_cc_pkt pkt;

  assert_not_null(ents);
  memset(&log, 0, sizeof(log));
  /* ngtcp2_conn.c conn_reset_conn_stat_cc */
  memset(&cstat, 0, sizeof(cstat));
  cstat.min_rtt = UINT64_MAX;
  cstat.smoothed_rtt = initial_rtt;
  cstat.rttvar = initial_rtt / 2;
  cstat.initial_rtt = initial_rtt;
  cstat.first_rtt_sample_ts = UINT64_MAX;
  cstat.loss_detection_timer = UINT64_MAX;
  cstat.max_tx_udp_payload_size = {mds};
  cstat.cwnd = ngtcp2_cc_compute_initcwnd({mds});
  cstat.ssthresh = UINT64_MAX;
  cstat.congestion_recovery_start_ts = UINT64_MAX;
  cstat.send_quantum = 64 * 1024;
  memset(cstat.loss_time, 0xFF, sizeof(cstat.loss_time));
  memset(cstat.last_tx_pkt_ts, 0xFF, sizeof(cstat.last_tx_pkt_ts));
  ngtcp2_rst_init(&rst);
  ngtcp2_cc_cubic_init(&cubic, &log, &cstat, &rst);

  for (i = 0; i < sizeof(events) / sizeof(events[0]); ++i) {
    const struct ccdiff_event *ev = &events[i];
    ts = base + ev->t_us * NGTCP2_MICROSECONDS;

    /* A loss not followed by an ACK at the same instant came from the loss
       timer (ngtcp2_conn_on_loss_detection_timer -> ngtcp2_rtb_detect_lost_pkt). */
    if (npending && (pending_ts != ts || ev->kind == CCDIFF_SENT ||
                     ev->kind == CCDIFF_APP_IDLE)) {
      ngtcp2_cc_ack ack = {.largest_pkt_sent_ts = UINT64_MAX, .rtt = UINT64_MAX};
      ccdiff_declare_lost(cc, &cstat, &rst, ents, pending, npending, &ack, pending_ts);
      npending = 0;
    }

    switch (ev->kind) {
    case CCDIFF_SENT: {
      ngtcp2_rtb_entry *ent = &ents[ev->a];
      if (ev->app_limited) { /* ngtcp2_conn.c conn_write_vmsg_wrapper */
        rst.app_limited = ngtcp2_max(rst.delivered + cstat.bytes_in_flight, 1);
      }
      ent->hd.pkt_num = ev->a;
      ent->ts = ts;
      ent->lost_ts = UINT64_MAX;
      ent->pktlen = (size_t)ev->b;
      ent->flags = NGTCP2_RTB_ENTRY_FLAG_ACK_ELICITING;
      if (cc->on_pkt_sent) {
        cc->on_pkt_sent(cc, &cstat,
                        ngtcp2_cc_pkt_init(&pkt, ent->hd.pkt_num, ent->pktlen,
                                           NGTCP2_PKTNS_ID_APPLICATION, ts, 0, 0, 0));
      }
      cstat.bytes_in_flight += ent->pktlen; /* ngtcp2_rtb.c rtb_on_add */
      ngtcp2_rst_on_pkt_sent(&rst, ent, &cstat);
      ngtcp2_rst_update_app_limited(&rst, &cstat);
      if (cstat.bytes_in_flight >= cstat.cwnd) {
        rst.is_cwnd_limited = 1; /* ngtcp2_conn.c conn_write_vmsg_wrapper */
      }
      break;
    }
    case CCDIFF_APP_IDLE: /* a write call that found nothing to send */
      if (cstat.bytes_in_flight >= cstat.cwnd) {
        rst.is_cwnd_limited = 1;
      } else {
        rst.app_limited = ngtcp2_max(rst.delivered + cstat.bytes_in_flight, 1);
      }
      break;
    case CCDIFF_LOST:
      for (j = 0; j < ev->b; ++j) {
        pending[npending++] = pns[ev->a + j];
      }
      pending_ts = ts;
      break;
    case CCDIFF_ACK: { /* ngtcp2_rtb_recv_ack */
      ngtcp2_cc_ack ack = {.largest_pkt_sent_ts = UINT64_MAX, .rtt = UINT64_MAX};
      int64_t largest = pns[ev->a + ev->b - 1];
      /* ngtcp2_conn_update_rtt: the RFC 9002 estimate after this ACK's sample */
      cstat.latest_rtt = ev->rtt[0] * NGTCP2_MICROSECONDS;
      cstat.smoothed_rtt = ev->rtt[1] * NGTCP2_MICROSECONDS;
      cstat.rttvar = ev->rtt[2] * NGTCP2_MICROSECONDS;
      cstat.min_rtt = ev->rtt[3] * NGTCP2_MICROSECONDS;
      if (cstat.first_rtt_sample_ts == UINT64_MAX) {
        cstat.first_rtt_sample_ts = ts;
      }
      if (largest_acked < largest) {
        largest_acked = largest;
      }
      ngtcp2_rst_reset_rate_sample(&rst, &cstat);
      for (j = 0; j < ev->b; ++j) {
        ngtcp2_rtb_entry *ent = &ents[pns[ev->a + j]];
        if (ent->hd.pkt_num == largest_acked) {
          ack.largest_pkt_sent_ts = ent->ts;
        }
        cstat.bytes_in_flight -= ent->pktlen;
      }
      if (ack.largest_pkt_sent_ts != UINT64_MAX) {
        ack.rtt = ngtcp2_max(ts - ack.largest_pkt_sent_ts, NGTCP2_NANOSECONDS);
      }
      for (j = 0; j < ev->b; ++j) {
        ngtcp2_rtb_entry *ent = &ents[pns[ev->a + j]];
        ack.bytes_delivered += ent->pktlen;
        ack.pkt_delivered = ent->rst.delivered;
        ngtcp2_rst_update_rate_sample(&rst, ent, ts);
      }
      ngtcp2_rst_on_ack_recv(&rst, &cstat);
      if (npending) { /* ngtcp2_rtb_detect_lost_pkt within the same ACK */
        ccdiff_declare_lost(cc, &cstat, &rst, ents, pending, npending, &ack, ts);
        npending = 0;
      }
      cc->on_ack_recv(cc, &cstat, &ack, ts);
      break;
    }
    }
{checks}  }

  free(ents);
"""

NGTCP2_HELPERS = r"""
/* ccdiff: the loss part of ngtcp2_rtb_detect_lost_pkt (ngtcp2_rtb.c). */
static void ccdiff_declare_lost(ngtcp2_cc *cc, ngtcp2_conn_stat *cstat,
                                ngtcp2_rst *rst, ngtcp2_rtb_entry *ents,
                                const int64_t *pending, size_t npending,
                                ngtcp2_cc_ack *ack, ngtcp2_tstamp ts) {
  ngtcp2_tstamp latest_ts = 0;
  int64_t largest = -1;
  uint64_t bytes_lost = 0;
  ngtcp2_cc_pkt pkt;
  size_t i;

  for (i = 0; i < npending; ++i) {
    ngtcp2_rtb_entry *ent = &ents[pending[i]];
    if (ent->hd.pkt_num > largest) {
      largest = ent->hd.pkt_num;
      latest_ts = ent->ts;
    }
    cstat->bytes_in_flight -= ent->pktlen;
    bytes_lost += ent->pktlen;
    rst->lost += ent->pktlen;
    if (cc->on_pkt_lost) {
      cc->on_pkt_lost(cc, cstat,
                      ngtcp2_cc_pkt_init(&pkt, ent->hd.pkt_num, ent->pktlen,
                                         NGTCP2_PKTNS_ID_APPLICATION, ent->ts,
                                         ent->rst.lost, ent->rst.tx_in_flight,
                                         ent->rst.is_app_limited),
                      ts);
    }
    ent->flags |= NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED;
    ent->lost_ts = ts;
  }
  ack->bytes_lost = bytes_lost;
  cc->congestion_event(cc, cstat, latest_ts, ack, ts);
}
"""

NGTCP2_INCLUDES = ('#include <stdlib.h>\n#include <string.h>\n\n#include "ngtcp2_cc.h"\n'
                   '#include "ngtcp2_conn_stat.h"\n#include "ngtcp2_log.h"\n#include "ngtcp2_rst.h"\n'
                   '#include "ngtcp2_rtb.h"\n#include "ngtcp2_macro.h"\n')


def find_violation(trace, invariant: str, spec: str):
    from ..replay import replay
    result = replay(trace, [spec])
    for finding in result.violations:
        if finding.invariant == invariant:
            return finding
    raise NotExpressible(f"the trace shows no {invariant} on {spec}")


IDLE_DETAIL = re.compile(r"grew cwnd (\d+) -> (\d+): ([\d.]+) bytes per byte acknowledged, "
                         r"against ([\d.]+) in the round trip before")


def idle_inflation_check(trace, resolved: list, finding, mds: int) -> tuple:
    """The checker's idle-inflation rule (ccdiff/invariants.py finish_idle_watch) as one
    bound on cwnd after the finding's event: growth over the first round trip after the
    idle, at most max(2 datagrams, (2 max(pre-idle rate, Reno rate) + 0.05) per byte acked).
    The bound is never tighter than the checker's: every byte acked counts, and the
    pre-idle rate is rounded up."""
    match = IDLE_DETAIL.search(finding.detail)
    if not match:
        raise NotExpressible(f"unexpected idle-inflation detail: {finding.detail!r}")
    base, pre_rate = int(match.group(1)), float(match.group(4)) + 0.0005
    index = finding.event_index
    start = max(i for i in range(index + 1) if resolved[i].kind == SENT_KIND and resolved[i].bytes_in_flight == 0)
    acked = sum(r.acked_bytes for r in resolved[start:index + 1] if r.kind == ACK_KIND)
    allowed = max(2 * mds, int((2 * max(pre_rate, mds / base) + 0.05) * acked) + 1)
    text = (f"first round trip after the idle (events {start}..{index}): cwnd {base} at the first send, "
            f"{acked} bytes acknowledged; RFC 9438 §4.2 (t excludes the idle period) keeps the growth "
            f"per byte acked near the {pre_rate - 0.0005:.3f} of the round trip before the idle; "
            f"ccdiff allows 2 x max(that, the Reno rate {mds}/{base}) + 0.05 per byte (or 2 datagrams)")
    return index, base + allowed, text


from ..ledger import ACKED as ACK_KIND, SENT as SENT_KIND  # noqa: E402


def ngtcp2_test(trace, invariant: str, name: str, comment: str = "", finding=None,
                spec: str = "ngtcp2") -> str:
    """A C test function for ngtcp2's tests/ngtcp2_cc_test.c, or NotExpressible.

    `finding` (ccdiff.invariants.Finding) is the violation to assert; without it the
    trace is replayed on `spec` to find it."""
    from ..ledger import Ledger
    if invariant != "idle-inflation":
        raise KeyError(invariant)
    if finding is None:
        finding = find_violation(trace, invariant, spec)
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    mds = trace.header.max_datagram_size
    rows, pns, max_pending, pending = [], [], 0, 0
    for index, (ev, r) in enumerate(zip(trace.events, resolved)):
        kind = type(ev)
        if kind is Sent:
            rows.append((NGTCP2_SENT, ev.t, ev.pn, ev.bytes, int(bool(r.packets[0][3])), (0, 0, 0, 0)))
        elif kind is Ack:
            if r.spurious:
                raise NotExpressible(f"event {index}: an ACK of a packet declared lost (undo) is not modelled")
            if getattr(ev, "ecn_ce", False):
                raise NotExpressible(f"event {index}: ECN-CE is not modelled")
            numbers = sorted(p[0] for p in r.packets)
            rows.append((NGTCP2_ACK, ev.t, len(pns), len(numbers), 0, r.rtt))
            pns.extend(numbers)
            pending = 0
        elif kind is Lost:
            numbers = sorted(p[0] for p in r.packets)
            rows.append((NGTCP2_LOST, ev.t, len(pns), len(numbers), 0, (0, 0, 0, 0)))
            pns.extend(numbers)
            pending += len(numbers)
            max_pending = max(max_pending, pending)
        elif kind is AppIdle:
            rows.append((NGTCP2_APP_IDLE, ev.t, 0, 0, 0, (0, 0, 0, 0)))
        elif kind is AppData:
            rows.append(None)   # nothing reaches the controller until the next send
        else:
            raise NotExpressible(f"event {index}: {kind.__name__} is not modelled")
    at, bound, why = idle_inflation_check(trace, resolved, finding, mds)
    max_pn = max((ev.pn for ev in trace.events if type(ev) is Sent), default=0)
    from ..clock import DEFAULT_CLOCK_BASE_US
    fn = "test_ngtcp2_cc_cubic_" + re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    out = [f"/* {line} */" for line in (comment or "").splitlines()]
    out += [f"/* {why}. */", f"void {fn}(void) {{",
            f"  enum {{ CCDIFF_SENT = {NGTCP2_SENT}, CCDIFF_ACK = {NGTCP2_ACK}, CCDIFF_LOST = {NGTCP2_LOST}, "
            f"CCDIFF_APP_IDLE = {NGTCP2_APP_IDLE} }};",
            "  static const struct ccdiff_event {",
            "    int kind, app_limited;",
            "    uint64_t t_us; /* trace time */",
            "    int64_t a;     /* SENT: packet number; ACK/LOST: first index into pns */",
            "    uint64_t b;    /* SENT: bytes; ACK/LOST: number of packets */",
            "    uint64_t rtt[4]; /* ACK: latest, smoothed, rttvar, min (us) */",
            "    size_t trace_event; /* index in the ccdiff trace */",
            "  } events[] = {"]
    kept = []
    for index, row in enumerate(rows):
        if row is None:
            continue
        kind, t, a, b, app, rtt = row
        out.append(f"    {{{kind}, {app}, {t}, {a}, {b}, {{{rtt[0]}, {rtt[1]}, {rtt[2]}, {rtt[3]}}}, {index}}},")
        kept.append(index)
    out.append("  };")
    out.append("  static const int64_t pns[] = {")
    for i in range(0, len(pns), 16):
        out.append("    " + ", ".join(str(p) for p in pns[i:i + 16]) + ",")
    if not pns:
        out.append("    0,")
    out.append("  };")
    checks = (f"    if (ev->trace_event == {at}) {{\n"
              f"      /* {finding.detail} */\n"
              f"      assert_uint64(cstat.cwnd, <=, {bound});\n"
              f"    }}\n")
    driver = NGTCP2_DRIVER
    for key, value in {"max_pn": max_pn, "max_pending": max(max_pending, 1),
                       "initial_rtt_us": trace.header.initial_rtt_us, "base_us": DEFAULT_CLOCK_BASE_US,
                       "mds": mds, "checks": checks}.items():
        driver = driver.replace("{" + key + "}", str(value))
    out.append(driver.strip("\n"))
    out.append("}")
    return "\n".join(out) + "\n"


def ngtcp2_test_file(test: str) -> str:
    """The includes and helper the generated function needs, then the function: the text to
    paste into tests/ngtcp2_cc_test.c (the includes are already there but ngtcp2_rst.h,
    ngtcp2_rtb.h)."""
    return NGTCP2_INCLUDES + NGTCP2_HELPERS + "\n" + test


def rust_event_table(trace, app_events: bool) -> tuple:
    """(the trace's events resolved by the ledger, the rows of a generated Rust test's EVENTS
    table): (trace event, kind, t, packet numbers, bytes sent, ACK delay, flag), flag = the
    send was app-limited / the ACK carried ECN-CE.  The quinn and s2n-quic generators share it;
    app_events: keep app_idle / app_data as APP_IDLE / APP_DATA rows (quinn's driver reads
    them), else leave them out.  NotExpressible for what the drivers do not model."""
    from ..ledger import Ledger
    from ..trace import Ack, AppData, AppIdle, Lost, Sent
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    rows = []
    for index, (ev, r) in enumerate(zip(trace.events, resolved)):
        kind = type(ev)
        if kind is Sent:
            rows.append((index, "SENT", ev.t, [ev.pn], ev.bytes, 0, bool(r.packets[0][3])))
        elif kind is Ack:
            if r.spurious:
                raise NotExpressible(f"event {index}: an ACK of a packet declared lost (spurious) is not modelled")
            rows.append((index, "ACK", ev.t, [p[0] for p in r.packets], 0, ev.ack_delay or 0,
                         bool(getattr(ev, "ecn_ce", False))))
        elif kind is Lost:
            rows.append((index, "LOST", ev.t, sorted(p[0] for p in r.packets), 0, 0, False))
        elif kind in (AppIdle, AppData):
            if app_events:
                rows.append((index, "APP_IDLE" if kind is AppIdle else "APP_DATA", ev.t, [], 0, 0, False))
        else:
            raise NotExpressible(f"event {index}: {kind.__name__} is not modelled")
    return resolved, rows


def wrap_lines(text: str, width: int = 88) -> list:
    import textwrap
    return textwrap.wrap(text, width) or [""]
