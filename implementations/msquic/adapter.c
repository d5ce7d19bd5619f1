/*
 * ccdiff adapter for msquic's CUBIC (src/core/cubic.c), ABI version 3
 * (implementations/include/ccdiff_adapter.h).
 *
 * msquic's own controller code runs unmodified: cubic.c is #included whole
 * (build.sh copies it out of the tree so that its "precomp.h" is shim/precomp.h)
 * and driven through its QUIC_CONGESTION_CONTROL function table, which
 * CubicCongestionControlInitialize (cubic.c:893-920) installs.  This file is the
 * caller: per ccdiff event it does what msquic's loss detection
 * (src/core/loss_detection.c) does around the table's callbacks, in its order.
 * Line numbers are msquic 2.5.1 (crate msquic 2.5.1-beta, commit 88b16399).
 *
 * Event mapping:
 *   CCD_SENT   QuicLossDetectionOnPacketSent (loss_detection.c:422, 452-454):
 *              LargestSentPacketNumber = pn, then OnDataSent(PacketLength)
 *              for an ack-eliciting packet (every ccdiff packet is).  The
 *              connection's Send.NextPacketNumber (HyStart's round end,
 *              cubic.c:161, 913, 525) is pn + 1.
 *   CCD_ACKED  QuicLossDetectionProcessAckBlocks (loss_detection.c:1300-1626):
 *              1. previously lost packets acknowledged leave LostPackets; when
 *                 that empties the list, OnSpuriousCongestionEvent (1333-1391);
 *              2. the RTT sample (ccd_event.rtt: the harness's RFC 9002
 *                 estimator stands for QuicConnUpdateRtt, 1500-1521);
 *              3. a new largest acknowledged with new CE marks: OnEcn
 *                 (1523-1566; the path's ECN is taken as validated);
 *              4. QuicLossDetectionDetectAndHandleLostPackets (1597): forget
 *                 lost packets older than 2 PTO (936-957), then the loss
 *                 itself, held back from the CCD_LOST of the same instant;
 *              5. OnDataAcknowledged if the largest acknowledged grew or
 *                 retransmittable bytes were acknowledged (1600-1624), with
 *                 LargestAck = the largest ever acknowledged (1431-1436),
 *                 MinRtt = the smallest now - sent of the packets acknowledged,
 *                 less the ACK delay when it is at least as large (1488, 1507-1512).
 *   CCD_LOST   the loss: OnDataLost (loss_detection.c:1067-1075) with the
 *              largest lost packet number and the bytes.  msquic detects
 *              losses inside ACK processing after the spurious check and ECN
 *              (step 4 above), so the adapter holds the loss back, reports the
 *              loss-timer path's state for the CCD_LOST (the loss applied at
 *              once, as QuicLossDetectionProcessTimerOperation would), and
 *              re-applies it inside the CCD_ACKED of the same instant
 *              (stack.toml: loss_applied_with_ack = true).
 *   CCD_PERSISTENT_CONGESTION  msquic has no separate call: persistent
 *              congestion is a flag on that same OnDataLost,
 *              `PersistentCongestion = ProbeCount > QUIC_PERSISTENT_CONGESTION_THRESHOLD`
 *              (loss_detection.c:1071-1072).  The held-back loss is re-applied
 *              as one call with the flag set.
 *   CCD_APP_IDLE  SetAppLimited, as the send path calls it (loss_detection.c:464-469):
 *              a no-op for CUBIC, whose IsAppLimited is FALSE (cubic.c:854-871); the
 *              window is limited by 2 x BytesInFlightMax instead (cubic.c:654-666).
 *   CCD_APP_DATA  nothing (no controller call on a stream write).
 * Not driven (docs/entry-points.md): Reset (path changes, cubic.c:147-175),
 * OnDataInvalidated (discarded keys, 400-414), CanSend / GetSendAllowance /
 * SetExemption (the harness gates sends itself; pacing changes no window).
 *
 * Clock: stack time = clock_base_us + trace time, microseconds (msquic's
 * TimeNow is CxPlatTimeUs64()).  Packet numbers: msquic's first packet of a
 * connection is 0 (Send.NextPacketNumber starts at 0 and HyStartRoundEnd is
 * read from it at initialization), so trace packet numbers are offset by the
 * first one sent.
 */
#include "precomp.h"
#include "cubic.c"

#include "ccdiff_adapter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef MSQ_VERSION
#define MSQ_VERSION "unknown"
#endif

uint64_t msq_now_us;
static __thread char msq_assert_text[160];

void msq_assert_failed(const char* expr, const char* file, int line)
{
  if (msq_assert_text[0] == 0)
    snprintf(msq_assert_text, sizeof(msq_assert_text), "msquic assertion failed: %s (%s:%d)",
             expr, file, line);
}

typedef struct {
  uint64_t pn;     /* msquic packet number (trace pn - first pn) */
  int64_t sent_us; /* trace time */
} msq_lost;

typedef struct {
  msq_lost* items;
  size_t n, cap;
} msq_lost_list;

/* Everything a held-back loss may have to undo. */
typedef struct {
  QUIC_CONNECTION conn;
  int64_t recovery_start;
} msq_saved;

typedef struct {
  QUIC_CONNECTION conn;          /* the controller lives in conn.CongestionControl */
  QUIC_SETTINGS_INTERNAL settings;
  int64_t base;
  int any_sent;
  uint64_t first_pn;
  uint64_t largest_sent;         /* LossDetection->LargestSentPacketNumber */
  int any_ack;
  uint64_t largest_ack;          /* LossDetection->LargestAck */
  msq_lost_list lost;            /* LossDetection->LostPackets */
  int64_t recovery_start;        /* trace time of the congestion event in force */
  /* PeerTransportParams.MaxAckDelay, whole ms as on the wire: the trace header's
   * (ccd_config.max_ack_delay_us; RFC 9000 18.2 and msquic's
   * QUIC_TP_MAX_ACK_DELAY_DEFAULT: 25 ms when the peer sends none).  Only the
   * 2-PTO retention of lost packets reads it. */
  uint64_t peer_max_ack_delay_ms;
  /* The held-back loss (CCD_LOST, then maybe CCD_PERSISTENT_CONGESTION). */
  int pending;
  int64_t pending_t;
  uint64_t pending_largest;      /* msquic pn */
  uint32_t pending_bytes;
  uint32_t pending_count;        /* its packets: the last ones of `lost` */
  int pending_pc;
  msq_saved before;              /* state before the loss was applied provisionally */
  msq_lost_list before_lost;
  char err[256];
} msq_ctl;

uint32_t ccd_abi_version(void) { return CCD_ABI_VERSION; }

const char* ccd_describe(void)
{
  return "msquic " MSQ_VERSION " cubic; options: hystart=off|on";
}

static int parse_options(msq_ctl* c, const char* opts, char* err, size_t err_len)
{
  static const char accepted[] = "hystart=off|on";
  if (opts == NULL) return 0;
  const char* s = opts;
  while (*s) {
    const char* end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    char item[128];
    if (n >= sizeof(item)) n = sizeof(item) - 1;
    memcpy(item, s, n);
    item[n] = 0;
    if (n > 0) {
      char* eq = strchr(item, '=');
      if (eq == NULL) {
        snprintf(err, err_len, "msquic: option '%s' is not key=value (accepted: %s)", item, accepted);
        return -1;
      }
      *eq = 0;
      const char* v = eq + 1;
      if (strcmp(item, "hystart") == 0) {
        if (strcmp(v, "on") == 0) c->settings.HyStartEnabled = TRUE;
        else if (strcmp(v, "off") == 0) c->settings.HyStartEnabled = FALSE;
        else {
          snprintf(err, err_len, "msquic: option hystart: unknown value '%s' (accepted: %s)", v, accepted);
          return -1;
        }
      } else {
        snprintf(err, err_len, "msquic: unknown option '%s' (accepted: %s)", item, accepted);
        return -1;
      }
    }
    if (!end) break;
    s = end + 1;
  }
  return 0;
}

static QUIC_CONGESTION_CONTROL* CC(msq_ctl* c) { return &c->conn.CongestionControl; }

void* ccd_open(const ccd_config* cfg, char* err, size_t err_len)
{
  if (err && err_len) err[0] = 0;
  if (cfg == NULL || cfg->max_datagram_size == 0 || cfg->max_datagram_size > 65507) {
    snprintf(err, err_len, "msquic: max_datagram_size must be in 1..65507");
    return NULL;
  }
  if (cfg->clock_base_us <= 0 || cfg->clock_base_us > CCD_MAX_CLOCK_BASE_US) {
    snprintf(err, err_len, "msquic: clock_base_us %lld is not in 1..%lld",
             (long long)cfg->clock_base_us, (long long)CCD_MAX_CLOCK_BASE_US);
    return NULL;
  }
  msq_ctl* c = (msq_ctl*)calloc(1, sizeof(msq_ctl));
  if (c == NULL) {
    snprintf(err, err_len, "msquic: out of memory");
    return NULL;
  }
  /* msquic's defaults (quicdef.h, applied by QuicSettingsSetDefault). */
  c->settings.SendIdleTimeoutMs = QUIC_DEFAULT_SEND_IDLE_TIMEOUT_MS;
  c->settings.InitialWindowPackets = QUIC_INITIAL_WINDOW_PACKETS;
  c->settings.HyStartEnabled = QUIC_DEFAULT_HYSTART_ENABLED;
  c->settings.PacingEnabled = QUIC_DEFAULT_SEND_PACING;
  c->settings.NetStatsEventEnabled = QUIC_DEFAULT_NET_STATS_EVENT_ENABLED;
  if (parse_options(c, cfg->options, err, err_len) != 0) {
    free(c);
    return NULL;
  }
  c->base = cfg->clock_base_us;
  c->peer_max_ack_delay_ms = cfg->max_ack_delay_us / 1000;
  c->recovery_start = CCD_NO_TIME;
  QUIC_CONNECTION* conn = &c->conn;
  conn->Settings = c->settings;
  /* An IPv4 path whose UDP payload is the trace's datagram size: cubic.c counts
   * every window in QuicPathGetDatagramPayloadSize units (MTU - 28). */
  conn->Paths[0].Route.RemoteAddress.Family = QUIC_ADDRESS_FAMILY_INET;
  conn->Paths[0].Mtu = (uint16_t)(cfg->max_datagram_size + CXPLAT_MIN_IPV4_HEADER_SIZE +
                                  CXPLAT_UDP_HEADER_SIZE);
  conn->Paths[0].SmoothedRtt = (uint64_t)cfg->initial_rtt_us;
  conn->Paths[0].RttVariance = (uint64_t)cfg->initial_rtt_us / 2;
  msq_now_us = (uint64_t)c->base;
  msq_assert_text[0] = 0;
  CubicCongestionControlInitialize(CC(c), &c->settings);
  return c;
}

void ccd_close(void* ctl)
{
  msq_ctl* c = (msq_ctl*)ctl;
  if (c == NULL) return;
  free(c->lost.items);
  free(c->before_lost.items);
  free(c);
}

const char* ccd_last_error(void* ctl)
{
  msq_ctl* c = (msq_ctl*)ctl;
  return c ? c->err : "msquic: no controller";
}

/* ---- LostPackets ----------------------------------------------------------- */

static int lost_push(msq_lost_list* l, uint64_t pn, int64_t sent_us)
{
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    msq_lost* p = (msq_lost*)realloc(l->items, cap * sizeof(*p));
    if (p == NULL) return -1;
    l->items = p;
    l->cap = cap;
  }
  l->items[l->n].pn = pn;
  l->items[l->n].sent_us = sent_us;
  l->n++;
  return 0;
}

static int lost_copy(msq_lost_list* dst, const msq_lost_list* src)
{
  dst->n = 0;
  for (size_t i = 0; i < src->n; i++)
    if (lost_push(dst, src->items[i].pn, src->items[i].sent_us) != 0) return -1;
  return 0;
}

/* Remove pn if present; 1 if it was. */
static int lost_remove(msq_lost_list* l, uint64_t pn)
{
  for (size_t i = 0; i < l->n; i++) {
    if (l->items[i].pn == pn) {
      memmove(&l->items[i], &l->items[i + 1], (l->n - i - 1) * sizeof(msq_lost));
      l->n--;
      return 1;
    }
  }
  return 0;
}

/* QuicLossDetectionDetectAndHandleLostPackets (loss_detection.c:936-957): lost
 * packets below the largest acknowledged, sent more than 2 PTO ago
 * (QuicLossDetectionComputeProbeTimeout, 226-245: SRTT + 4 RTTVAR +
 * max_ack_delay), are forgotten: their late ACK is no longer a spurious loss.
 * The list is in packet-number order and the scan stops at the first kept one. */
static void lost_forget_old(msq_ctl* c, int64_t now)
{
  const QUIC_PATH* path = &c->conn.Paths[0];
  uint64_t two_pto = 2 * (path->SmoothedRtt + 4 * path->RttVariance +
                          MS_TO_US(c->peer_max_ack_delay_ms));
  size_t k = 0;
  while (k < c->lost.n && c->any_ack && c->lost.items[k].pn < c->largest_ack &&
         (uint64_t)(now - c->lost.items[k].sent_us) > two_pto)
    k++;
  if (k) {
    memmove(c->lost.items, c->lost.items + k, (c->lost.n - k) * sizeof(msq_lost));
    c->lost.n -= k;
  }
}

/* ---- calls into cubic.c, with the recovery start they set ------------------ */

/* cubic.c keeps the recovery boundary as a packet number
 * (RecoverySentPacketNumber = LargestSentPacketNumber at the congestion event,
 * cubic.c:719, 754): packets sent after the event end it.  The event's time is
 * that boundary in time; the adapter reads it from the stack's own counter of
 * congestion events (Stats.Send.CongestionCount, cubic.c:288), and reports none
 * once the stack holds no boundary (HasHadCongestionEvent cleared by an undo,
 * cubic.c:799). */
static void note_recovery(msq_ctl* c, uint32_t events_before, int64_t now)
{
  if (c->conn.Stats.Send.CongestionCount != events_before) c->recovery_start = now;
  if (!CC(c)->Cubic.HasHadCongestionEvent) c->recovery_start = CCD_NO_TIME;
}

static void apply_loss(msq_ctl* c, uint64_t largest_lost, uint32_t bytes, int pc, int64_t now)
{
  QUIC_LOSS_EVENT loss = {
    .LargestPacketNumberLost = largest_lost,
    .LargestSentPacketNumber = c->largest_sent,
    .NumRetransmittableBytes = bytes,
    .PersistentCongestion = pc ? TRUE : FALSE,
  };
  uint32_t before = c->conn.Stats.Send.CongestionCount;
  CC(c)->QuicCongestionControlOnDataLost(CC(c), &loss);
  note_recovery(c, before, now);
}

static void save_state(msq_ctl* c)
{
  c->before.conn = c->conn;
  c->before.recovery_start = c->recovery_start;
}

static void restore_state(msq_ctl* c)
{
  c->conn = c->before.conn;
  c->recovery_start = c->before.recovery_start;
}

static uint64_t msq_pn(const msq_ctl* c, uint64_t trace_pn) { return trace_pn - c->first_pn; }

static int on_sent(msq_ctl* c, const ccd_event* ev)
{
  if (ev->n_packets != 1) {
    snprintf(c->err, sizeof(c->err), "msquic: CCD_SENT carries %u packets, expected 1", ev->n_packets);
    return -1;
  }
  const ccd_packet* p = &ev->packets[0];
  if (!c->any_sent) {
    c->any_sent = 1;
    c->first_pn = p->pn;
  } else if (p->pn <= c->first_pn + c->largest_sent) {
    snprintf(c->err, sizeof(c->err), "msquic: packet number %llu not above the last sent",
             (unsigned long long)p->pn);
    return -1;
  }
  c->largest_sent = msq_pn(c, p->pn);
  c->conn.Send.NextPacketNumber = c->largest_sent + 1;
  CC(c)->QuicCongestionControlOnDataSent(CC(c), p->bytes);
  return 0;
}

static int on_lost(msq_ctl* c, const ccd_event* ev)
{
  if (ev->n_packets == 0) return 0;
  /* The loss timer's path: loss_detection.c:936-957 then 1058-1081. */
  save_state(c);
  if (lost_copy(&c->before_lost, &c->lost) != 0) goto oom;
  lost_forget_old(c, ev->now_us);
  uint32_t bytes = 0;
  uint64_t largest = 0;
  for (uint32_t i = 0; i < ev->n_packets; i++) {
    uint64_t pn = msq_pn(c, ev->packets[i].pn);
    bytes += ev->packets[i].bytes;
    if (pn > largest) largest = pn;
    if (lost_push(&c->lost, pn, ev->packets[i].sent_us) != 0) goto oom;
  }
  apply_loss(c, largest, bytes, 0, ev->now_us);
  c->pending = 1;
  c->pending_t = ev->now_us;
  c->pending_largest = largest;
  c->pending_bytes = bytes;
  c->pending_count = ev->n_packets;
  c->pending_pc = 0;
  return 0;
oom:
  snprintf(c->err, sizeof(c->err), "msquic: out of memory");
  return -1;
}

static int on_persistent_congestion(msq_ctl* c, const ccd_event* ev)
{
  if (!c->pending || c->pending_t != ev->now_us) {
    snprintf(c->err, sizeof(c->err),
             "msquic: persistent congestion without a loss at the same time (msquic reports it "
             "as a flag of the loss, loss_detection.c:1071)");
    return -1;
  }
  /* One OnDataLost with PersistentCongestion set, as loss_detection.c:1067-1075
   * makes it: undo the provisional call, make it again with the flag. */
  restore_state(c);
  apply_loss(c, c->pending_largest, c->pending_bytes, 1, ev->now_us);
  c->pending_pc = 1;
  return 0;
}

static int on_acked(msq_ctl* c, const ccd_event* ev)
{
  int64_t now = ev->now_us;
  int held = c->pending && c->pending_t == now;
  msq_lost_list lost_after_loss = {0};
  if (held) {
    /* Undo the provisional loss: msquic detects it after the spurious check
     * and ECN of this ACK (loss_detection.c:1333-1391, 1523-1597). */
    restore_state(c);
    lost_after_loss = c->lost;            /* keep the list with the new losses */
    c->lost = c->before_lost;
    c->before_lost = (msq_lost_list){0};
  }
  c->pending = 0;

  /* 1. Spurious losses (loss_detection.c:1333-1391). */
  int removed = 0;
  for (uint32_t i = 0; i < ev->n_spurious; i++) {
    uint64_t pn = msq_pn(c, ev->spurious[i].pn);
    removed |= lost_remove(&c->lost, pn);
  }
  if (removed && c->lost.n == 0) {
    BOOLEAN was_in_recovery = CC(c)->Cubic.IsInRecovery;
    CC(c)->QuicCongestionControlOnSpuriousCongestionEvent(CC(c));
    if (was_in_recovery) note_recovery(c, c->conn.Stats.Send.CongestionCount, now);
  }

  /* The packets this ACK newly acknowledges (1400-1500). */
  uint32_t bytes = 0;
  uint64_t min_rtt = UINT64_MAX, largest_in_ack = 0;
  int any = 0, new_largest = 0;
  for (uint32_t i = 0; i < ev->n_packets; i++) {
    uint64_t pn = msq_pn(c, ev->packets[i].pn);
    uint64_t rtt = (uint64_t)(now - ev->packets[i].sent_us);
    bytes += ev->packets[i].bytes;
    if (rtt < min_rtt) min_rtt = rtt;
    if (!any || pn > largest_in_ack) largest_in_ack = pn;
    any = 1;
    if (!c->any_ack || c->largest_ack <= pn) {   /* 1431-1436: from SentPackets only */
      c->any_ack = 1;
      c->largest_ack = pn;
      new_largest = 1;
    }
  }
  for (uint32_t i = 0; i < ev->n_spurious; i++) {
    uint64_t pn = msq_pn(c, ev->spurious[i].pn);
    uint64_t rtt = (uint64_t)(now - ev->spurious[i].sent_us);
    if (rtt < min_rtt) min_rtt = rtt;
    if (!any || pn > largest_in_ack) largest_in_ack = pn;
    any = 1;
  }
  if (new_largest && min_rtt >= (uint64_t)ev->ack_delay_us) min_rtt -= (uint64_t)ev->ack_delay_us;

  /* 2. RTT: the harness's RFC 9002 estimator after this ACK's sample. */
  QUIC_PATH* path = &c->conn.Paths[0];
  path->SmoothedRtt = (uint64_t)ev->rtt.smoothed_us;
  path->RttVariance = (uint64_t)ev->rtt.rttvar_us;
  if (ev->rtt.latest_us > 0) path->GotFirstRttSample = TRUE;

  /* 3. ECN (loss_detection.c:1523-1566): only with a new largest acknowledged. */
  if (new_largest && (ev->flags & CCD_FLAG_ECN_CE)) {
    QUIC_ECN_EVENT ecn = {
      .LargestPacketNumberAcked = largest_in_ack,
      .LargestSentPacketNumber = c->largest_sent,
    };
    uint32_t before = c->conn.Stats.Send.CongestionCount;
    CC(c)->QuicCongestionControlOnEcn(CC(c), &ecn);
    note_recovery(c, before, now);
  }

  /* 4. Loss detection (loss_detection.c:1597): forget old lost packets, then this ACK's loss. */
  if (new_largest || bytes > 0) lost_forget_old(c, now);
  if (held) {
    /* The new losses join the list after the forgetting pass, as in 959-1056
     * (the last pending_count entries of the provisional list). */
    size_t from = lost_after_loss.n > c->pending_count ? lost_after_loss.n - c->pending_count : 0;
    for (size_t i = from; i < lost_after_loss.n; i++) {
      if (lost_push(&c->lost, lost_after_loss.items[i].pn, lost_after_loss.items[i].sent_us) != 0) {
        free(lost_after_loss.items);
        snprintf(c->err, sizeof(c->err), "msquic: out of memory");
        return -1;
      }
    }
    free(lost_after_loss.items);
    apply_loss(c, c->pending_largest, c->pending_bytes, c->pending_pc, now);
  }

  /* 5. OnDataAcknowledged (loss_detection.c:1600-1624). */
  if (new_largest || bytes > 0) {
    QUIC_ACK_EVENT ack = {
      .TimeNow = (uint64_t)(c->base + now),
      .LargestAck = c->largest_ack,
      .LargestSentPacketNumber = c->largest_sent,
      .NumRetransmittableBytes = bytes,
      .SmoothedRtt = path->SmoothedRtt,
      .MinRtt = min_rtt,
      .HasLoss = c->lost.n > 0,
      .AdjustedAckTime = (uint64_t)(c->base + now - ev->ack_delay_us),
      .IsImplicit = FALSE,
      .MinRttValid = TRUE,
    };
    CC(c)->QuicCongestionControlOnDataAcknowledged(CC(c), &ack);
  }
  return 0;
}

/* ---- snapshot ----------------------------------------------------------------- */

static void fill_snapshot(msq_ctl* c, ccd_snapshot* out)
{
  const QUIC_CONGESTION_CONTROL_CUBIC* k = &CC(c)->Cubic;
  memset(out, 0, sizeof(*out));
  out->cwnd = k->CongestionWindow;
  out->ssthresh = k->SlowStartThreshold == UINT32_MAX ? CCD_NONE : k->SlowStartThreshold;
  out->bytes_in_flight = k->BytesInFlight;
  if (k->IsInRecovery)
    out->phase = CCD_PHASE_RECOVERY;
  else
    out->phase = k->CongestionWindow < k->SlowStartThreshold ? CCD_PHASE_SLOW_START
                                                             : CCD_PHASE_CONGESTION_AVOIDANCE;
  out->recovery_start_us = c->recovery_start;
  /* TimeOfCongAvoidStart: 0 until slow start first ends (calloc'ed state). */
  out->epoch_start_us = k->TimeOfCongAvoidStart ? (int64_t)k->TimeOfCongAvoidStart - c->base
                                                : CCD_NO_TIME;
  /* WindowMax and KCubic are 0 until the first congestion event and cubic.c
   * computes with that 0 (HyStart's exit to avoidance, cubic.c:530-538, keeps
   * them): "unset", reported absent (docs/adapters.md). */
  out->w_max_bytes = k->WindowMax ? (double)k->WindowMax : NAN;
  out->k_us = k->WindowMax ? (double)k->KCubic * 1000.0 : NAN;
}

int ccd_step(void* ctl, const ccd_event* ev, ccd_snapshot* out)
{
  msq_ctl* c = (msq_ctl*)ctl;
  if (c == NULL || ev == NULL || out == NULL) return -1;
  c->err[0] = 0;
  msq_assert_text[0] = 0;
  msq_now_us = (uint64_t)(c->base + ev->now_us);
  /* A held-back loss not followed by its ACK is final as applied. */
  if (c->pending && (ev->now_us != c->pending_t ||
                     (ev->kind != CCD_ACKED && ev->kind != CCD_PERSISTENT_CONGESTION))) {
    c->pending = 0;
  }
  int rc = 0;
  switch (ev->kind) {
  case CCD_SENT: rc = on_sent(c, ev); break;
  case CCD_ACKED: rc = on_acked(c, ev); break;
  case CCD_LOST: rc = on_lost(c, ev); break;
  case CCD_PERSISTENT_CONGESTION: rc = on_persistent_congestion(c, ev); break;
  case CCD_APP_IDLE:
    /* loss_detection.c:464-469: the send path finds less than a packet to send with
     * the window open and marks the controller app-limited; a no-op for CUBIC
     * (cubic.c:864-871), called so that a release that reacts to it is driven. */
    CC(c)->QuicCongestionControlSetAppLimited(CC(c));
    break;
  case CCD_APP_DATA: break;
  default:
    snprintf(c->err, sizeof(c->err), "msquic: unknown event kind %u", ev->kind);
    return -1;
  }
  if (rc != 0) return rc;
  if (msq_assert_text[0]) {
    snprintf(c->err, sizeof(c->err), "%s", msq_assert_text);
    return -1;
  }
  fill_snapshot(c, out);
  return 0;
}
