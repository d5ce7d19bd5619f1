"""A finding's minimal trace as a C test for picoquic's own suite (issue 30 item 7).

picoquic's tests (picoquictest/*.c) are `int NAME_test()` functions returning 0 or -1,
listed in picoquic_t/picoquic_t.c.  The generated function drives picoquic's CUBIC through
its public entry point, `picoquic_cubic_algorithm->alg_notify`, on a calloc'ed
picoquic_cnx_t + picoquic_path_t that carry what the controller reads -- the same set-up
and the same notification order as ccdiff's adapter (implementations/picoquic/adapter.c,
whose comments cite sender.c, frames.c and loss_recovery.c line by line):

  send: restart_from_idle when the path was app-limited and idle past the retransmit
        timer (sender.c:943-954); sender-limited stamp; bytes_in_transit; pacing; for a
        cwnd-limited send, last_cwin_blocked_time + cwin_blocked (sender.c:2601-2610);
  ACK:  highest acknowledged; the ranges (delivered, bytes_in_transit); ecn_ec;
        rtt_measurement; the bandwidth estimate; the losses this ACK reveals (repeat, one per
        packet, frames.c:3101); acknowledgement (frames.c:3104-3131);
  loss with no ACK at its instant: repeat at once (loss_recovery.c:941);
  app_idle: picoquic_mark_path_app_limited + last_sender_limited_time (sender.c:3307-3316).

The RTT estimate each event carries is the RFC 9002 one ccdiff's harness computes (the
adapter sets smoothed_rtt, rtt_variant and rtt_min from it).  After the event where the
finding breaks the rule, the invariant's check fails the test.
"""
from __future__ import annotations

import re

from ..trace import Ack, AppData, AppIdle, Lost, Sent
from .unit_test import NotExpressible, find_violation

SENT_, ACK_, LOST_, APP_IDLE_ = 1, 2, 3, 4
F_APP_LIMITED, F_ECN_CE, F_WITH_ACK, F_CA = 1, 2, 4, 8

DRIVER = r"""
  picoquic_cnx_t* cnx = (picoquic_cnx_t*)calloc(1, sizeof(picoquic_cnx_t));
  picoquic_path_t* path = (picoquic_path_t*)calloc(1, sizeof(picoquic_path_t));
  picoquic_path_t* paths[1];
  picoquic_packet_context_t* pkt_ctx;
  const picoquic_congestion_algorithm_t* alg = picoquic_cubic_algorithm;
  static uint64_t sent_us[{max_pn} + 1], sent_bytes[{max_pn} + 1];
  static int sent_app_limited[{max_pn} + 1];
  uint64_t pending[{max_pending}];
  size_t npending = 0, i, j;
  int sender_app_limited = 0, ret = 0;
  const uint64_t base = {base_us}; /* picoquic time of trace time 0 (never 0: 0 is "never") */

  if (cnx == NULL || path == NULL) {
    free(cnx);
    free(path);
    return -1;
  }
  /* A single-path 1-RTT connection in the ready state (quicctx.c:1930-1948, 3040-3051). */
  paths[0] = path;
  cnx->path = paths;
  cnx->nb_paths = 1;
  cnx->nb_path_alloc = 1;
  cnx->cnx_state = picoquic_state_ready;
  cnx->local_parameters.max_ack_delay = PICOQUIC_ACK_DELAY_MAX;
  pkt_ctx = &cnx->pkt_ctx[picoquic_packet_context_application];
  cnx->start_time = base;
  pkt_ctx->highest_acknowledged = UINT64_MAX;
  pkt_ctx->latest_time_acknowledged = base;
  pkt_ctx->highest_acknowledged_time = base;
  path->cnx = cnx;
  path->smoothed_rtt = {initial_rtt_us};
  path->retransmit_timer = PICOQUIC_INITIAL_RETRANSMIT_TIMER;
  path->cwin = PICOQUIC_CWIN_INITIAL;
  picoquic_pacing_init(&path->pacing, base);
  path->send_mtu = {mds};
  cnx->congestion_alg = alg;
  alg->alg_init(path, NULL, base); /* picoquic_set_congestion_algorithm_ex, quicctx.c:5143 */

  for (i = 0; ret == 0 && i < sizeof(events) / sizeof(events[0]); ++i) {
    const struct ccdiff_event* ev = &events[i];
    uint64_t now = base + ev->t_us;
    uint64_t cwin_before = path->cwin;
    uint64_t acked_trace_bytes = 0;
    picoquic_per_ack_state_t st;

    /* The harness's RFC 9002 estimate stands in for picoquic's (timing.c). */
    path->smoothed_rtt = ev->rtt[0];
    path->rtt_variant = ev->rtt[1];
    path->rtt_min = ev->rtt[2];

    switch (ev->kind) {
    case CCDIFF_SENT: {
      uint64_t pn = ev->a, idle_restart = path->retransmit_timer;
      if (idle_restart < PICOQUIC_INITIAL_MAX_RETRANSMIT_TIMER) {
        idle_restart = PICOQUIC_INITIAL_MAX_RETRANSMIT_TIMER;
      }
      if (path->bytes_in_transit == 0 && path->delivered_limited_index != 0 &&
          path->last_sent_time != 0 && now > path->last_sent_time + idle_restart) {
        memset(&st, 0, sizeof(st)); /* sender.c:943-954 */
        st.pc = picoquic_packet_context_application;
        st.is_app_limited = 1;
        alg->alg_notify(cnx, path, picoquic_congestion_notification_restart_from_idle, &st, now);
      }
      sender_app_limited = (ev->flags & CCDIFF_APP_LIMITED) != 0;
      if (sender_app_limited) {
        path->last_sender_limited_time = now; /* sender.c:1426 */
      }
      if (pn + 1 > pkt_ctx->send_sequence) {
        pkt_ctx->send_sequence = pn + 1;
      }
      sent_us[pn] = ev->t_us;
      sent_bytes[pn] = ev->b;
      sent_app_limited[pn] = sender_app_limited;
      path->latest_sent_time = now;
      path->bytes_in_transit += ev->b; /* sender.c:697-707 */
      path->is_cc_data_updated = 1;
      if (path->bytes_in_transit >= path->cwin) {
        path->last_cwin_blocked_time = now;
      }
      picoquic_update_pacing_after_send(path, ev->b, now);
      path->last_sent_time = now;
      if (!sender_app_limited) { /* cwnd-limited: the next attempt finds the window closed */
        memset(&st, 0, sizeof(st));
        st.pc = picoquic_packet_context_application;
        path->last_cwin_blocked_time = now;
        alg->alg_notify(cnx, path, picoquic_congestion_notification_cwin_blocked, &st, now);
      }
      break;
    }
    case CCDIFF_LOST:
      for (j = 0; j < ev->b; ++j) {
        uint64_t pn = pns[ev->a + j];
        if (ev->flags & CCDIFF_WITH_ACK) {
          pending[npending++] = pn; /* found by the ACK at this instant, after its RTT sample */
        } else {
          ccdiff_lost(alg, cnx, path, pn, sent_us[pn], sent_bytes[pn], sent_app_limited[pn], base, now);
        }
      }
      break;
    case CCDIFF_APP_IDLE: { /* sender.c:3307-3316, picoquic_mark_path_app_limited */
      uint64_t limited_index = path->delivered + path->bytes_in_transit;
      path->delivered_limited_index = limited_index ? limited_index : 1;
      path->last_sender_limited_time = now;
      sender_app_limited = 1;
      break;
    }
    case CCDIFF_ACK: {
      uint64_t largest = pns[ev->a + ev->b - 1], first = UINT64_MAX, data_acked = 0;
      if (pkt_ctx->highest_acknowledged == UINT64_MAX || largest > pkt_ctx->highest_acknowledged) {
        pkt_ctx->highest_acknowledged = largest; /* frames.c:3143-3150, 3898-3903 */
        pkt_ctx->highest_acknowledged_time = now;
        if (pkt_ctx->latest_time_acknowledged < base + sent_us[largest]) {
          pkt_ctx->latest_time_acknowledged = base + sent_us[largest];
        }
      }
      for (j = ev->b; j-- > 0;) { /* ranges, largest first (frames.c:3772-3830) */
        uint64_t pn = pns[ev->a + j], len = sent_bytes[pn] - CCDIFF_CHECKSUM_OVERHEAD;
        path->delivered += len;
        if (path->delivered_limited_index != 0 && path->delivered >= path->delivered_limited_index) {
          path->delivered_limited_index = 0; /* frames.c:2798-2801 */
        }
        if (base + sent_us[pn] > path->last_time_acked_data_frame_sent) {
          path->last_time_acked_data_frame_sent = base + sent_us[pn];
        }
        if (first == UINT64_MAX) {
          first = pn;
        }
        data_acked += len; /* frames.c:3072 */
        acked_trace_bytes += sent_bytes[pn];
        path->bytes_in_transit -= sent_bytes[pn];
      }
      if (ev->flags & CCDIFF_ECN_CE) { /* frames.c:3994-4003 */
        memset(&st, 0, sizeof(st));
        st.pc = picoquic_packet_context_application;
        st.lost_packet_number = largest;
        alg->alg_notify(cnx, path, picoquic_congestion_notification_ecn_ec, &st, now);
      }
      { /* process_decoded_packet_data, frames.c:3079-3136 */
        uint64_t send_time = base + sent_us[first], rtt_estimate = 0;
        if (now > send_time) { /* timing.c:194-206 */
          uint64_t ack_delay = ev->ack_delay;
          rtt_estimate = now - send_time;
          if (path->rtt_is_initialized && ack_delay > 0) {
            if (ack_delay > cnx->local_parameters.max_ack_delay) {
              ack_delay = cnx->local_parameters.max_ack_delay;
            }
            if (path->rtt_min + ack_delay < rtt_estimate) {
              rtt_estimate -= ack_delay;
            }
          }
        }
        path->rtt_sample = rtt_estimate;
        path->rtt_is_initialized = 1;
        memset(&st, 0, sizeof(st));
        st.pc = picoquic_packet_context_application;
        st.rtt_measurement = rtt_estimate;
        alg->alg_notify(cnx, path, picoquic_congestion_notification_rtt_measurement, &st, now);
        picoquic_estimate_max_path_bandwidth(path, send_time, now);
        for (j = 0; j < npending; ++j) { /* loss detection, frames.c:3099-3102 */
          uint64_t pn = pending[j];
          ccdiff_lost(alg, cnx, path, pn, sent_us[pn], sent_bytes[pn], sent_app_limited[pn], base, now);
        }
        npending = 0;
        if (path->rtt_sample > 0) { /* frames.c:3104-3131 */
          memset(&st, 0, sizeof(st));
          st.pc = picoquic_packet_context_application;
          st.rtt_measurement = path->rtt_sample;
          st.nb_bytes_acknowledged = data_acked;
          st.is_app_limited = sent_app_limited[first];
          alg->alg_notify(cnx, path, picoquic_congestion_notification_acknowledgement, &st, now);
        }
      }
      if (sender_app_limited) {
        path->last_sender_limited_time = now; /* sender.c:1426 / 3315 */
      }
      break;
    }
    }
{checks}  }

  alg->alg_delete(path);
  free(path);
  free(cnx);
  return ret;
"""

HELPERS = r"""
/* ccdiff: picoquic_count_and_notify_loss (loss_recovery.c:895-945), then the dequeue that
   removes the packet from bytes_in_transit (loss_recovery.c:867, sender.c:739). */
static void ccdiff_lost(const picoquic_congestion_algorithm_t* alg, picoquic_cnx_t* cnx,
                        picoquic_path_t* path, uint64_t pn, uint64_t sent_us, uint64_t bytes,
                        int app_limited, uint64_t base, uint64_t now)
{
  picoquic_per_ack_state_t st;
  memset(&st, 0, sizeof(st));
  path->total_bytes_lost += bytes - CCDIFF_CHECKSUM_OVERHEAD;
  st.pc = picoquic_packet_context_application;
  st.rtt_measurement = path->rtt_sample;
  st.lost_packet_number = pn;
  st.lost_packet_sent_time = base + sent_us;
  st.nb_bytes_newly_lost = bytes - CCDIFF_CHECKSUM_OVERHEAD;
  st.is_app_limited = app_limited;
  alg->alg_notify(cnx, path, picoquic_congestion_notification_repeat, &st, now);
  path->bytes_in_transit -= bytes;
}
"""

INCLUDES = ('#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n'
            '#include "picoquic_internal.h"\n#include "picoquic_cubic.h"\n#include "cc_common.h"\n\n'
            '/* frames.c, not declared in a header. */\n'
            'void picoquic_estimate_max_path_bandwidth(picoquic_path_t* path_x, uint64_t send_time,\n'
            '    uint64_t delivery_time);\n'
            '/* bytes_in_transit counts whole datagrams, acked and lost counts exclude the AEAD tag\n'
            '   (frames.c:3072; 16 for AES-GCM and ChaCha20-Poly1305). */\n'
            '#define CCDIFF_CHECKSUM_OVERHEAD 16u\n')

# The checks after the finding's event, by invariant.
CHECKS = {
    "ca-growth-bound": (
        "    /* RFC 9438 §4.4: \"In this region, cwnd MUST be incremented by ... for each received new\n"
        "       ACK, where target is calculated as described in Section 4.2.\"  target is at most\n"
        "       1.5 * cwnd (§4.2): one acknowledged byte grows the window by at most half a byte,\n"
        "       plus one datagram of rounding. */\n"
        "    if (ev->kind == CCDIFF_ACK && (ev->flags & CCDIFF_CA) &&\n"
        "        path->cwin > cwin_before + acked_trace_bytes / 2 + {mds}) {\n"
        "      fprintf(stderr, \"event %zu (t = %\" PRIu64 \" us): congestion avoidance grew cwin %\" PRIu64\n"
        "              \" -> %\" PRIu64 \" on %\" PRIu64 \" bytes acknowledged (at most %\" PRIu64 \" + {mds})\\n\",\n"
        "              ev->trace_event, ev->t_us, cwin_before, path->cwin, acked_trace_bytes,\n"
        "              acked_trace_bytes / 2);\n"
        "      ret = -1;\n"
        "    }\n"),
}


def picoquic_test(trace, invariant: str, name: str, comment: str = "", spec: str = "picoquic",
                  require_violation: bool = True) -> str:
    """A C test function for picoquic's picoquictest/, or KeyError (no check for this
    invariant) / NotExpressible (events the driver does not model, or -- unless
    require_violation is False, for a control -- a trace that shows no such violation)."""
    from ..clock import DEFAULT_CLOCK_BASE_US
    from ..ledger import Ledger
    from ..replay import replay
    from ..invariants import in_slow_start
    check = CHECKS[invariant]
    if require_violation:
        find_violation(trace, invariant, spec)
    if dict(resolve_options(spec)).get("cc", "cubic") != "cubic":
        raise NotExpressible("the test drives picoquic's CUBIC; newreno has no check here")
    snapshots = replay(trace, [spec]).runs[spec_label(spec)].snapshots
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    rows, pns, max_pending, pending = [], [], 0, 0
    events = trace.events
    for index, (ev, r) in enumerate(zip(events, resolved)):
        kind = type(ev)
        rtt = (r.rtt[1], r.rtt[2], r.rtt[3])
        if kind is Sent:
            rows.append((SENT_, ev.t, ev.pn, ev.bytes, F_APP_LIMITED if r.packets[0][3] else 0, 0, rtt, index))
        elif kind is Ack:
            if r.spurious:
                raise NotExpressible(f"event {index}: an ACK of a packet declared lost (spurious) is not modelled")
            numbers = sorted(p[0] for p in r.packets)
            flags = (F_ECN_CE if getattr(ev, "ecn_ce", False) else 0)
            before = snapshots[index - 1] if index else None
            if before is not None and not in_slow_start(before):
                flags |= F_CA
            rows.append((ACK_, ev.t, len(pns), len(numbers), flags, ev.ack_delay or 0, rtt, index))
            pns.extend(numbers)
            pending = 0
        elif kind is Lost:
            # The adapter's rule: the losses of an instant are found by the ACK that follows
            # them at that instant (no other event between), else they are applied at once.
            nxt = next((e for e in events[index + 1:] if type(e) is not Lost), None)
            with_ack = nxt is not None and type(nxt) is Ack and nxt.t == ev.t
            numbers = sorted(p[0] for p in r.packets)
            rows.append((LOST_, ev.t, len(pns), len(numbers), F_WITH_ACK if with_ack else 0, 0, rtt, index))
            pns.extend(numbers)
            if with_ack:
                pending += len(numbers)
                max_pending = max(max_pending, pending)
        elif kind is AppIdle:
            rows.append((APP_IDLE_, ev.t, 0, 0, 0, 0, rtt, index))
        elif kind is AppData:
            continue    # picoquic learns of new data only when it next prepares a packet
        else:
            raise NotExpressible(f"event {index}: {kind.__name__} is not modelled (picoquic has no RFC 9002 "
                                 f"persistent congestion; the adapter replays it as timer losses)")
    mds = trace.header.max_datagram_size
    max_pn = max((ev.pn for ev in events if type(ev) is Sent), default=0)
    fn = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") + "_test"
    out = [f"/* {line} */" for line in (comment or "").splitlines()]
    out += [f"int {fn}(void)", "{",
            f"  enum {{ CCDIFF_SENT = {SENT_}, CCDIFF_ACK = {ACK_}, CCDIFF_LOST = {LOST_}, "
            f"CCDIFF_APP_IDLE = {APP_IDLE_} }};",
            f"  enum {{ CCDIFF_APP_LIMITED = {F_APP_LIMITED}, CCDIFF_ECN_CE = {F_ECN_CE}, "
            f"CCDIFF_WITH_ACK = {F_WITH_ACK}, CCDIFF_CA = {F_CA} }};",
            "  static const struct ccdiff_event {",
            "    int kind;",
            "    uint64_t t_us;      /* trace time */",
            "    uint64_t a;         /* SENT: packet number; ACK/LOST: first index into pns */",
            "    uint64_t b;         /* SENT: bytes (whole datagram); ACK/LOST: number of packets */",
            "    int flags;          /* CCDIFF_CA: congestion avoidance before this ACK (ccdiff's replay) */",
            "    uint64_t ack_delay; /* ACK: the frame's ack delay (us) */",
            "    uint64_t rtt[3];    /* smoothed, rttvar, min (us): RFC 9002 §5 after this event */",
            "    size_t trace_event; /* index in the ccdiff trace */",
            "  } events[] = {"]
    for kind, t, a, b, flags, delay, rtt, index in rows:
        out.append(f"    {{{kind}, {t}, {a}, {b}, {flags}, {delay}, {{{rtt[0]}, {rtt[1]}, {rtt[2]}}}, {index}}},")
    out.append("  };")
    out.append("  static const uint64_t pns[] = {")
    for i in range(0, len(pns), 16):
        out.append("    " + ", ".join(str(p) for p in pns[i:i + 16]) + ",")
    if not pns:
        out.append("    0,")
    out.append("  };")
    driver = DRIVER
    for key, value in {"max_pn": max_pn, "max_pending": max(max_pending, 1), "base_us": DEFAULT_CLOCK_BASE_US,
                       "initial_rtt_us": trace.header.initial_rtt_us, "mds": mds,
                       "checks": check.replace("{mds}", str(mds))}.items():
        driver = driver.replace("{" + key + "}", str(value))
    out.append(driver.strip("\n"))
    out.append("}")
    return "\n".join(out) + "\n"


def picoquic_test_file(test: str) -> str:
    """The includes and the loss helper, then the function: what to add to a file of
    picoquictest/ (and `#include <inttypes.h>` for PRIu64)."""
    return "#include <inttypes.h>\n" + INCLUDES + HELPERS + "\n" + test


def resolve_options(spec: str):
    from ..stacks import load_recipes, resolve
    target = resolve(spec, load_recipes())
    if target.recipe is None or target.recipe.name != "picoquic":
        raise NotExpressible(f"{spec} is not a picoquic build")
    return target.options


def spec_label(spec: str) -> str:
    from ..stacks import load_recipes, resolve
    return resolve(spec, load_recipes()).label
