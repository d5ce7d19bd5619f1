/*
 * ccdiff adapter for picoquic's CUBIC (picoquic/cubic.c) and NewReno
 * (picoquic/newreno.c), ABI version 3 (implementations/include/ccdiff_adapter.h).
 *
 * No connection is built.  A calloc'ed picoquic_cnx_t + picoquic_path_t carry
 * exactly the fields the controllers and their helpers (cc_common.c, pacing.c,
 * picoquic_estimate_max_path_bandwidth in frames.c) read, and this file calls
 * alg_notify() in the order picoquic's own ACK / loss / send code does.  Line
 * references are to picoquic 1.1.53.0 (the aiopquic 0.6.1 sdist).
 *
 * Event mapping (per ccd_event):
 *   CCD_SENT  -> what sender.c does around a packet: sender-limited / cwin-blocked
 *                stamps, send_sequence, bytes_in_transit; picoquic has no CC send
 *                hook, only cwin_blocked when a cwnd-limited sender finds the
 *                window closed (cubic and newreno ignore it).
 *   CCD_LOST  -> one picoquic_congestion_notification_repeat per packet
 *                (loss_recovery.c:941), then the packet leaves bytes_in_transit.
 *   CCD_PERSISTENT_CONGESTION -> picoquic has no RFC 9002 persistent congestion.
 *                Its nearest mechanism is the retransmission timer, whose losses
 *                are notified as picoquic_congestion_notification_timeout
 *                (loss_recovery.c:942, is_timer_expired).  Those packets would
 *                have been timer losses, not repeats, so the preceding CCD_LOST
 *                group is rolled back and replayed as timeout notifications.
 *   CCD_ACKED -> the order of picoquic_decode_ack_frame + process_decoded_packet_data:
 *                acked ranges, spurious_repeat, ecn_ec, rtt_measurement, peak
 *                bandwidth, loss detection (the CCD_LOST group of this same
 *                instant, replayed here: picoquic detects those losses inside the
 *                ACK, after the RTT update, frames.c:3101), acknowledgement.
 *   CCD_SENT after an idle period also delivers restart_from_idle, as
 *                sender.c:943-954 does (cubic and newreno ignore it; see on_sent).
 * Every notification kind, delivered or not and why: docs/entry-points.md.
 * Option cwnd_limited=flag|window: by default (flag) a CCD_SENT without
 *                CCD_FLAG_APP_LIMITED is cwnd-limited (the harness's contract) and
 *                stamps last_cwin_blocked_time; window keeps picoquic's own rule only
 *                (bytes_in_transit >= cwin after the send, sender.c:704), for traces of
 *                picoquic's own connections, whose sender also stops for pacing
 *                (docs/qlog-import.md, "On picoquic's own connections").
 * Not mirrored: picoquic's own RTT estimator (the harness's RFC 9002 values are
 * used), path MTU resets on timer losses (loss_recovery.c:873-893; the trace's
 * datagram size is fixed) and the delivery-rate estimate (BBR-only).
 */
#include "picoquic_internal.h"
#include "cc_common.h"
/* The controllers' state structs are private to their .c files; the snapshot
 * and the checkpoint need them, so the unmodified upstream files are compiled
 * as part of this translation unit. */
#include "cubic.c"
#include "newreno.c"
#include "ccdiff_adapter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* frames.c:2811, not declared in any header. */
void picoquic_estimate_max_path_bandwidth(picoquic_path_t* path_x, uint64_t send_time,
    uint64_t delivery_time);

/* Referenced by pacing.c:132 only when a path-quality callback is installed
 * (never here); the real one lives in quicctx.c with the whole connection. */
void picoquic_refresh_path_quality_thresholds(picoquic_path_t* path_x) { (void)path_x; }

/* AEAD tag bytes: bytes_in_transit counts whole datagrams (sender.c:699,739)
 * but acked/lost byte counts use packet->length, which excludes the tag
 * (frames.c:3072 data_acked += length; checksum_overhead is 16 for AES-GCM and
 * ChaCha20-Poly1305, picoquic_get_checksum_length). */
#define PQ_CHECKSUM_OVERHEAD 16u


typedef struct {
  picoquic_cnx_t* cnx;
  picoquic_path_t* path;
  picoquic_path_t* paths[1];
  const picoquic_congestion_algorithm_t* alg;
  int is_cubic;
  size_t alg_size;
  int sender_app_limited; /* the last CCD_SENT was app-limited */
  /* cwnd_limited=window: a send is cwnd-limited only when it leaves the window full
   * (bytes_in_transit >= cwin, sender.c:699-705), as picoquic's own sender, which also
   * stops for pacing; default (flag): every send without CCD_FLAG_APP_LIMITED is. */
  int window_blocked;
  /* Losses declared at group_t and not yet followed by another kind of event,
   * with the state from just before the first of them. */
  int group_open;
  int group_timeout; /* a CCD_PERSISTENT_CONGESTION turned them into timer losses */
  int64_t group_t;
  picoquic_cnx_t ck_cnx;
  picoquic_path_t ck_path;
  union { picoquic_cubic_state_t c; picoquic_newreno_state_t n; } ck_alg;
  ccd_packet* pend;
  size_t n_pend, cap_pend;
  /* Lost packets picoquic still keeps for spurious detection, oldest loss first:
   * its retransmitted queue (sender.c:761-775), which an ACK of a packet no longer
   * in it does not find, so no spurious_repeat (frames.c:2643-2715). */
  ccd_packet* held;
  size_t n_held, cap_held;
  uint64_t clock_base; /* picoquic time of trace time 0 */
  char err[256];
} ctl_t;

/* picoquic's clock is microseconds of the application's clock
 * (picoquic_current_time), never 0, and 0 means "never" in the path stamps
 * the controllers compare with send times (last_sender_limited_time,
 * last_cwin_blocked_time, cubic.c:261, cc_common.c:215).  Trace time t is
 * clock_base + t, the uptime-like base every adapter uses
 * (ccdiff_adapter.h); snapshots are converted back to trace time. */
static uint64_t pq_time(const ctl_t* c, int64_t t) { return c->clock_base + (uint64_t)t; }
static int64_t trace_time(const ctl_t* c, uint64_t t) { return (int64_t)(t - c->clock_base); }

uint32_t ccd_abi_version(void) { return CCD_ABI_VERSION; }

const char* ccd_describe(void)
{
  return "picoquic " PICOQUIC_VERSION " cubic; options: cc=cubic|newreno, cwnd_limited=flag|window";
}

static int parse_options(const char* opts, int* is_cubic, int* window_blocked, char* err, size_t err_len)
{
  *is_cubic = 1;
  *window_blocked = 0;
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
        snprintf(err, err_len, "picoquic: option '%s' is not key=value (accepted: cc=cubic|newreno, cwnd_limited=flag|window)", item);
        return -1;
      }
      *eq = 0;
      const char* v = eq + 1;
      if (strcmp(item, "cc") == 0) {
        if (strcmp(v, "cubic") == 0) *is_cubic = 1;
        else if (strcmp(v, "newreno") == 0) *is_cubic = 0;
        else {
          snprintf(err, err_len, "picoquic: option cc: unknown value '%s' (accepted: cubic|newreno)", v);
          return -1;
        }
      } else if (strcmp(item, "cwnd_limited") == 0) {
        if (strcmp(v, "flag") == 0) *window_blocked = 0;
        else if (strcmp(v, "window") == 0) *window_blocked = 1;
        else {
          snprintf(err, err_len, "picoquic: option cwnd_limited: unknown value '%s' (accepted: flag|window)", v);
          return -1;
        }
      } else {
        snprintf(err, err_len, "picoquic: unknown option '%s' (accepted: cc=cubic|newreno, cwnd_limited=flag|window)", item);
        return -1;
      }
    }
    if (!end) break;
    s = end + 1;
  }
  return 0;
}

void* ccd_open(const ccd_config* cfg, char* err, size_t err_len)
{
  int is_cubic, window_blocked;
  if (err && err_len) err[0] = 0;
  if (cfg == NULL || cfg->max_datagram_size == 0) {
    snprintf(err, err_len, "picoquic: max_datagram_size must be > 0");
    return NULL;
  }
  if (cfg->max_datagram_size <= PQ_CHECKSUM_OVERHEAD) {
    snprintf(err, err_len, "picoquic: max_datagram_size must exceed the %u-byte AEAD tag", PQ_CHECKSUM_OVERHEAD);
    return NULL;
  }
  if (cfg->clock_base_us <= 0 || cfg->clock_base_us > CCD_MAX_CLOCK_BASE_US) {
    snprintf(err, err_len, "picoquic: clock_base_us %lld is not in 1..%lld",
             (long long)cfg->clock_base_us, (long long)CCD_MAX_CLOCK_BASE_US);
    return NULL;
  }
  if (parse_options(cfg->options, &is_cubic, &window_blocked, err, err_len) != 0) return NULL;

  ctl_t* c = (ctl_t*)calloc(1, sizeof(ctl_t));
  if (c == NULL) return NULL;
  c->cnx = (picoquic_cnx_t*)calloc(1, sizeof(picoquic_cnx_t));
  c->path = (picoquic_path_t*)calloc(1, sizeof(picoquic_path_t));
  if (c->cnx == NULL || c->path == NULL) {
    free(c->cnx); free(c->path); free(c);
    snprintf(err, err_len, "picoquic: out of memory");
    return NULL;
  }
  picoquic_cnx_t* cnx = c->cnx;
  picoquic_path_t* path = c->path;
  c->clock_base = (uint64_t)cfg->clock_base_us;

  /* A single-path 1-RTT connection in the ready state. */
  c->paths[0] = path;
  cnx->path = c->paths;
  cnx->nb_paths = 1;
  cnx->nb_path_alloc = 1;
  cnx->cnx_state = picoquic_state_ready;
  cnx->is_multipath_enabled = 0; /* cc_common.c:31 uses cnx->pkt_ctx[application] */
  cnx->is_time_stamp_enabled = 0; /* HyStart on RTT, not one-way delay (cubic.c:352) */
  cnx->local_parameters.max_ack_delay = PICOQUIC_ACK_DELAY_MAX; /* quicctx.c:1427 */
  /* picoquic_init_packet_ctx, quicctx.c:3040-3051: send_sequence 0, so
   * highest_acknowledged starts at 0 - 1 = UINT64_MAX ("none yet"). */
  picoquic_packet_context_t* pkt_ctx = &cnx->pkt_ctx[picoquic_packet_context_application];
  pkt_ctx->send_sequence = 0;
  cnx->start_time = pq_time(c, 0);
  pkt_ctx->highest_acknowledged = pkt_ctx->send_sequence - 1;
  pkt_ctx->latest_time_acknowledged = cnx->start_time;
  pkt_ctx->highest_acknowledged_time = cnx->start_time;

  /* picoquic_create_path, quicctx.c:1930-1948; the harness owns the RTT
   * estimator, so the initial smoothed RTT is the trace's, not 250 ms. */
  path->cnx = cnx;
  path->smoothed_rtt = (uint64_t)cfg->initial_rtt_us;
  path->rtt_variant = 0;
  path->rtt_min = 0;
  path->retransmit_timer = PICOQUIC_INITIAL_RETRANSMIT_TIMER;
  path->cwin = PICOQUIC_CWIN_INITIAL;
  path->bytes_in_transit = 0;
  picoquic_pacing_init(&path->pacing, pq_time(c, 0));
  path->send_mtu = cfg->max_datagram_size;

  c->is_cubic = is_cubic;
  c->window_blocked = window_blocked;
  c->alg = is_cubic ? picoquic_cubic_algorithm : picoquic_newreno_algorithm;
  c->alg_size = is_cubic ? sizeof(picoquic_cubic_state_t) : sizeof(picoquic_newreno_state_t);
  cnx->congestion_alg = c->alg;
  /* picoquic_set_congestion_algorithm_ex, quicctx.c:5143: alg_init(path, NULL, now). */
  c->alg->alg_init(path, NULL, pq_time(c, 0));
  if (path->congestion_alg_state == NULL) {
    free(c->cnx); free(c->path); free(c);
    snprintf(err, err_len, "picoquic: alg_init failed");
    return NULL;
  }
  return c;
}

const char* ccd_last_error(void* ctl) { return ((ctl_t*)ctl)->err; }

void ccd_close(void* ctl)
{
  ctl_t* c = (ctl_t*)ctl;
  if (c == NULL) return;
  c->alg->alg_delete(c->path);
  free(c->pend);
  free(c->held);
  free(c->cnx);
  free(c->path);
  free(c);
}

static void notify(ctl_t* c, picoquic_congestion_notification_t n, picoquic_per_ack_state_t* st, int64_t now)
{
  c->alg->alg_notify(c->cnx, c->path, n, st, pq_time(c, now));
}

static uint64_t pkt_len(const ccd_packet* p)
{
  return p->bytes > PQ_CHECKSUM_OVERHEAD ? p->bytes - PQ_CHECKSUM_OVERHEAD : 0;
}

static int fail(ctl_t* c, const char* msg, uint64_t pn)
{
  snprintf(c->err, sizeof(c->err), "picoquic adapter: %s (pn %llu)", msg, (unsigned long long)pn);
  return -1;
}

/* The harness's RFC 9002 estimator stands in for picoquic's (timing.c). */
static void set_rtt(ctl_t* c, const ccd_event* ev)
{
  c->path->smoothed_rtt = (uint64_t)ev->rtt.smoothed_us;
  c->path->rtt_variant = (uint64_t)ev->rtt.rttvar_us;
  c->path->rtt_min = (uint64_t)ev->rtt.min_us;
}

static void on_sent(ctl_t* c, const ccd_packet* p, int app_limited, int64_t now)
{
  picoquic_path_t* path = c->path;
  picoquic_packet_context_t* pkt_ctx = &c->cnx->pkt_ctx[picoquic_packet_context_application];

  /* sender.c:889: the packet is app-limited for delivery-rate purposes while
   * a mark from picoquic_mark_path_app_limited is outstanding. */
  int delivered_app_limited = path->delivered_limited_index != 0;
  uint64_t inflight_prior = path->bytes_in_transit;
  uint64_t idle_restart_interval = path->retransmit_timer; /* sender.c:939-942 */
  if (idle_restart_interval < PICOQUIC_INITIAL_MAX_RETRANSMIT_TIMER)
    idle_restart_interval = PICOQUIC_INITIAL_MAX_RETRANSMIT_TIMER;
  /* sender.c:943-954: an ack-eliciting packet restarting from idle tells the
   * controller first (cubic.c ignores the notification: its default case). */
  if (inflight_prior == 0 && delivered_app_limited && path->last_sent_time != 0 &&
      pq_time(c, now) > path->last_sent_time + idle_restart_interval) {
    picoquic_per_ack_state_t st = { 0 };
    st.pc = picoquic_packet_context_application;
    st.inflight_prior = inflight_prior;
    st.is_app_limited = 1;
    notify(c, picoquic_congestion_notification_restart_from_idle, &st, now);
  }
  /* The stream scheduler found nothing more to send: sender.c:1426. */
  c->sender_app_limited = app_limited;
  if (app_limited) path->last_sender_limited_time = pq_time(c, now);
  /* sender.c:880 send_sequence++ (the trace's packet number is the sequence). */
  if (p->pn + 1 > pkt_ctx->send_sequence) pkt_ctx->send_sequence = p->pn + 1;
  path->latest_sent_time = pq_time(c, now); /* sender.c:882 */
  /* picoquic_queue_for_retransmit, sender.c:697-707. */
  path->bytes_in_transit += p->bytes;
  path->is_cc_data_updated = 1;
  if (path->bytes_in_transit >= path->cwin) path->last_cwin_blocked_time = pq_time(c, now);
  picoquic_update_pacing_after_send(path, p->bytes, pq_time(c, now));
  path->last_sent_time = pq_time(c, now); /* sender.c:956 */
  if (!app_limited && !c->window_blocked) {
    /* Not app-limited means cwnd-limited (ccdiff_adapter.h): the sender's next
     * attempt finds the window closed, sender.c:2601-2610.  picoquic's own sender
     * stamps last_cwin_blocked_time only when bytes_in_transit >= cwin (sender.c:704,
     * 2601, 3087, 3291): a send paced out with the window open (pacing.c) is neither
     * app- nor cwnd-limited, which the trace's flag cannot say; cwnd_limited=window
     * (for traces of picoquic's own connections: ccdiff import of its qlog) keeps
     * only the sender.c:704 stamp above. */
    picoquic_per_ack_state_t st = { 0 };
    st.pc = picoquic_packet_context_application;
    path->last_cwin_blocked_time = pq_time(c, now);
    notify(c, picoquic_congestion_notification_cwin_blocked, &st, now);
  }
}

/* picoquic_count_and_notify_loss (loss_recovery.c:895-945), then the dequeue
 * that removes the packet from bytes_in_transit (loss_recovery.c:867, sender.c:739). */
static int apply_loss(ctl_t* c, const ccd_packet* p, int timeout, int64_t now)
{
  picoquic_path_t* path = c->path;
  picoquic_per_ack_state_t st = { 0 };
  if (path->bytes_in_transit < p->bytes) return fail(c, "lost packet not in bytes_in_transit", p->pn);
  path->total_bytes_lost += pkt_len(p);
  st.pc = picoquic_packet_context_application;
  st.rtt_measurement = path->rtt_sample;
  st.lost_packet_number = p->pn;
  st.lost_packet_sent_time = pq_time(c, p->sent_us);
  st.nb_bytes_newly_lost = pkt_len(p);
  st.is_app_limited = p->app_limited ? 1 : 0;
  notify(c, timeout ? picoquic_congestion_notification_timeout : picoquic_congestion_notification_repeat, &st, now);
  path->bytes_in_transit -= p->bytes;
  return 0;
}

static int apply_group(ctl_t* c, int64_t now)
{
  for (size_t i = 0; i < c->n_pend; i++) {
    if (apply_loss(c, &c->pend[i], c->group_timeout, now) != 0) return -1;
  }
  return 0;
}

static void checkpoint(ctl_t* c)
{
  c->ck_cnx = *c->cnx;
  c->ck_path = *c->path;
  memcpy(&c->ck_alg, c->path->congestion_alg_state, c->alg_size);
}

static void rollback(ctl_t* c)
{
  *c->cnx = c->ck_cnx;
  *c->path = c->ck_path;
  memcpy(c->path->congestion_alg_state, &c->ck_alg, c->alg_size);
}

static int on_lost(ctl_t* c, const ccd_event* ev)
{
  if (!(c->group_open && c->group_t == ev->now_us && !c->group_timeout)) {
    checkpoint(c);
    c->group_open = 1;
    c->group_timeout = 0;
    c->group_t = ev->now_us;
    c->n_pend = 0;
  }
  if (c->n_pend + ev->n_packets > c->cap_pend) {
    size_t cap = (c->n_pend + ev->n_packets) * 2;
    ccd_packet* np = (ccd_packet*)realloc(c->pend, cap * sizeof(ccd_packet));
    if (np == NULL) return fail(c, "out of memory", 0);
    c->pend = np;
    c->cap_pend = cap;
  }
  if (c->n_held + ev->n_packets > c->cap_held) {
    size_t cap = (c->n_held + ev->n_packets) * 2;
    ccd_packet* nh = (ccd_packet*)realloc(c->held, cap * sizeof(ccd_packet));
    if (nh == NULL) return fail(c, "out of memory", 0);
    c->held = nh;
    c->cap_held = cap;
  }
  for (uint32_t i = 0; i < ev->n_packets; i++) {
    c->pend[c->n_pend++] = ev->packets[i];
    c->held[c->n_held++] = ev->packets[i]; /* sender.c:761-775 */
    if (apply_loss(c, &ev->packets[i], 0, ev->now_us) != 0) return -1;
  }
  return 0;
}

/* Takes pn out of the retransmitted queue; 0 if picoquic no longer keeps it. */
static int held_take(ctl_t* c, uint64_t pn)
{
  for (size_t i = 0; i < c->n_held; i++) {
    if (c->held[i].pn == pn) {
      memmove(&c->held[i], &c->held[i + 1], (c->n_held - i - 1) * sizeof(ccd_packet));
      c->n_held--;
      return 1;
    }
  }
  return 0;
}

/* picoquic_dequeue_old_retransmitted_packets (frames.c:2728-2747), run after each
 * ACK frame's ranges (frames.c:3964): from the oldest loss, forget packets sent more
 * than PICOQUIC_SPURIOUS_RETRANSMIT_DELAY_MAX (1 s) before the latest acknowledged
 * packet was sent.  The newest `keep` entries are this instant's losses, which
 * picoquic detects only after the ranges (frames.c:3101): not queued yet. */
static void forget_old_losses(ctl_t* c, size_t keep)
{
  uint64_t oldest_possible = c->cnx->pkt_ctx[picoquic_packet_context_application].latest_time_acknowledged;
  size_t k = 0;
  if (oldest_possible <= PICOQUIC_SPURIOUS_RETRANSMIT_DELAY_MAX) return;
  oldest_possible -= PICOQUIC_SPURIOUS_RETRANSMIT_DELAY_MAX;
  while (k + keep < c->n_held && pq_time(c, c->held[k].sent_us) < oldest_possible) k++;
  if (k == 0) return;   /* also keeps memmove off a NULL `held` (UBSan: zero offset to null) */
  memmove(c->held, c->held + k, (c->n_held - k) * sizeof(ccd_packet));
  c->n_held -= k;
}

static int on_persistent_congestion(ctl_t* c, const ccd_event* ev)
{
  if (!c->group_open || c->group_t != ev->now_us) {
    snprintf(c->err, sizeof(c->err), "picoquic adapter: persistent_congestion must follow a lost event at the same time");
    return -1;
  }
  if (c->group_timeout) return 0;
  /* Replay the group as retransmission-timer losses (loss_recovery.c:942). */
  rollback(c);
  set_rtt(c, ev);
  c->group_timeout = 1;
  return apply_group(c, ev->now_us);
}

static int on_acked(ctl_t* c, const ccd_event* ev)
{
  picoquic_path_t* path = c->path;
  picoquic_packet_context_t* pkt_ctx = &c->cnx->pkt_ctx[picoquic_packet_context_application];
  int64_t now = ev->now_us;
  int replay = c->group_open && c->group_t == now && !c->group_timeout;

  /* Losses found by this ACK: picoquic detects them after the acked ranges and
   * the RTT update (frames.c:3101), so undo them and replay them below.  Timer
   * losses (persistent congestion) happened before the ACK arrived. */
  if (replay) {
    rollback(c);
    set_rtt(c, ev);
  }

  const ccd_packet* top = NULL; /* largest newly acknowledged */
  for (uint32_t i = 0; i < ev->n_packets; i++)
    if (top == NULL || ev->packets[i].pn > top->pn) top = &ev->packets[i];
  for (uint32_t i = 0; i < ev->n_spurious; i++)
    if (top == NULL || ev->spurious[i].pn > top->pn) top = &ev->spurious[i];

  /* picoquic_find_acked_packet, frames.c:3143-3150, and frames.c:3898-3903. */
  uint64_t largest_in_path = 0;
  if (top != NULL && (top->pn > pkt_ctx->highest_acknowledged || pkt_ctx->highest_acknowledged == UINT64_MAX)) {
    pkt_ctx->highest_acknowledged = top->pn;
    pkt_ctx->highest_acknowledged_time = pq_time(c, now);
    if (pkt_ctx->latest_time_acknowledged < pq_time(c, top->sent_us))
      pkt_ctx->latest_time_acknowledged = pq_time(c, top->sent_us);
    largest_in_path = top->pn;
  }

  /* Acked ranges, largest first (picoquic_process_ack_range, frames.c:3772-3830). */
  const ccd_packet* first = NULL; /* first packet recorded: frames.c:3056-3072 */
  uint64_t data_acked = 0;
  for (uint32_t k = ev->n_packets; k-- > 0;) {
    const ccd_packet* p = &ev->packets[k];
    if (path->bytes_in_transit < p->bytes) return fail(c, "acked packet not in bytes_in_transit", p->pn);
    path->delivered += pkt_len(p);                        /* frames.c:3795 */
    /* frames.c:2798-2801: the app-limited mark ends once what was in flight
     * when it was set has been delivered. */
    if (path->delivered_limited_index != 0 && path->delivered >= path->delivered_limited_index)
      path->delivered_limited_index = 0;
    if (pq_time(c, p->sent_us) > path->last_time_acked_data_frame_sent)
      path->last_time_acked_data_frame_sent = pq_time(c, p->sent_us); /* frames.c:3638 */
    if (first == NULL) first = p;
    data_acked += pkt_len(p);                             /* frames.c:3072 */
    path->bytes_in_transit -= p->bytes;                   /* sender.c:739 */
  }
  /* picoquic_check_spurious_retransmission, frames.c:2643-2715: the packet is
   * recorded as acked too, then spurious_repeat is notified. */
  for (uint32_t k = ev->n_spurious; k-- > 0;) {
    const ccd_packet* p = &ev->spurious[k];
    picoquic_per_ack_state_t st = { 0 };
    /* Forgotten already: the range finds nothing, no notification. */
    if (!held_take(c, p->pn)) continue;
    if (pq_time(c, p->sent_us) > path->last_time_acked_data_frame_sent)
      path->last_time_acked_data_frame_sent = pq_time(c, p->sent_us);
    if (first == NULL) first = p;
    data_acked += pkt_len(p);
    path->total_bytes_lost = path->total_bytes_lost > pkt_len(p) ? path->total_bytes_lost - pkt_len(p) : 0;
    st.pc = picoquic_packet_context_application;
    st.lost_packet_number = p->pn;
    notify(c, picoquic_congestion_notification_spurious_repeat, &st, now);
  }
  forget_old_losses(c, replay ? c->n_pend : 0);

  /* ECN counts, end of picoquic_decode_ack_frame, frames.c:3994-4003. */
  if (ev->flags & CCD_FLAG_ECN_CE) {
    picoquic_per_ack_state_t st = { 0 };
    st.pc = picoquic_packet_context_application;
    st.lost_packet_number = largest_in_path;
    notify(c, picoquic_congestion_notification_ecn_ec, &st, now);
  }

  if (first != NULL) {
    /* process_decoded_packet_data, frames.c:3079-3136. */
    uint64_t send_time = pq_time(c, first->sent_us);
    /* picoquic_update_path_rtt, timing.c:194-206: the sample, less the ACK delay
     * once RTT is initialized; notified at timing.c:303-311. */
    uint64_t rtt_estimate = 0;
    if (pq_time(c, now) > send_time) {
      uint64_t ack_delay = ev->ack_delay_us > 0 ? (uint64_t)ev->ack_delay_us : 0;
      rtt_estimate = pq_time(c, now) - send_time;
      if (path->rtt_is_initialized && ack_delay > 0) {
        if (ack_delay > c->cnx->local_parameters.max_ack_delay) ack_delay = c->cnx->local_parameters.max_ack_delay;
        if (path->rtt_min + ack_delay < rtt_estimate) rtt_estimate -= ack_delay;
      }
    }
    path->rtt_sample = rtt_estimate;
    path->rtt_is_initialized = 1;
    {
      picoquic_per_ack_state_t st = { 0 };
      st.pc = picoquic_packet_context_application;
      st.rtt_measurement = rtt_estimate;
      notify(c, picoquic_congestion_notification_rtt_measurement, &st, now);
    }
    /* frames.c:3097 (the delivery-rate estimate of frames.c:3092 feeds only ACK
     * frequency and BBR-style controllers, not cubic/newreno). */
    picoquic_estimate_max_path_bandwidth(path, send_time, pq_time(c, now));
    /* Loss detection, frames.c:3099-3102. */
    if (replay && apply_group(c, now) != 0) return -1;
    /* The acknowledgement, frames.c:3104-3131, only with a non-zero RTT sample. */
    if (path->rtt_sample > 0) {
      picoquic_per_ack_state_t st = { 0 };
      st.pc = picoquic_packet_context_application;
      st.rtt_measurement = path->rtt_sample;
      st.nb_bytes_acknowledged = data_acked;
      st.is_app_limited = first->app_limited ? 1 : 0;
      notify(c, picoquic_congestion_notification_acknowledgement, &st, now);
    }
  } else if (replay && apply_group(c, now) != 0) {
    return -1;
  }
  /* After an incoming packet picoquic tries to send; an app-limited sender finds
   * no stream data and stamps the path again (sender.c:1426 / 3315). */
  if (c->sender_app_limited) path->last_sender_limited_time = pq_time(c, now);
  c->group_open = 0;
  return 0;
}

static void fill_snapshot(ctl_t* c, ccd_snapshot* out)
{
  picoquic_path_t* path = c->path;
  memset(out, 0, sizeof(*out));
  out->cwnd = path->cwin;
  out->bytes_in_flight = path->bytes_in_transit;
  out->recovery_start_us = CCD_NO_TIME;
  out->epoch_start_us = CCD_NO_TIME;
  out->w_max_bytes = NAN;
  out->k_us = NAN;
  if (c->is_cubic) {
    picoquic_cubic_state_t* s = (picoquic_cubic_state_t*)path->congestion_alg_state;
    out->ssthresh = s->ssthresh == UINT64_MAX ? CCD_NONE : s->ssthresh;
    /* alg_state is the phase (cubic.c:31-35); picoquic never enters
     * picoquic_cubic_alg_recovery (cubic.c:274-276): after a loss it goes
     * straight to congestion avoidance, and a packet sent now has a number
     * >= recovery_sequence, so its loss would count (cubic.c:333). */
    out->phase = s->alg_state == picoquic_cubic_alg_slow_start ? CCD_PHASE_SLOW_START
               : s->alg_state == picoquic_cubic_alg_recovery ? CCD_PHASE_RECOVERY
               : CCD_PHASE_CONGESTION_AVOIDANCE;
    /* Cubic marks recovery with a packet number (recovery_sequence), not a time. */
    /* start_of_epoch is kept in every state (cubic.c:61,140,176,184,292). */
    out->epoch_start_us = trace_time(c, s->start_of_epoch);
    /* W_max is in packets of send_mtu (cubic.c:158); before the first
     * congestion event it holds UINT64_MAX / send_mtu (cubic.c:59-60). */
    if (!(s->W_max >= (double)UINT64_MAX / (double)path->send_mtu)) {
      out->w_max_bytes = s->W_max * (double)path->send_mtu;
      out->k_us = s->K * 1000000.0; /* K is in seconds (cubic.c:126) */
    }
  } else {
    picoquic_newreno_state_t* s = (picoquic_newreno_state_t*)path->congestion_alg_state;
    out->ssthresh = s->nrss.ssthresh == UINT64_MAX ? CCD_NONE : s->nrss.ssthresh;
    out->phase = s->nrss.alg_state == picoquic_newreno_alg_slow_start ? CCD_PHASE_SLOW_START
               : CCD_PHASE_CONGESTION_AVOIDANCE;
    /* recovery_start is set on each congestion event (newreno.c:68). */
    if (s->nrss.ssthresh != UINT64_MAX) out->recovery_start_us = trace_time(c, s->nrss.recovery_start);
  }
}

/* ABI 3 CCD_APP_IDLE: the stream scheduler found no data to send, as in
 * sender.c:3307-3316: picoquic_mark_path_app_limited (sender.c:853-862) and
 * last_sender_limited_time.  CCD_APP_DATA has no counterpart: picoquic only
 * learns of new stream data when it next prepares a packet. */
static void on_app_idle(ctl_t* c, int64_t now)
{
  picoquic_path_t* path = c->path;
  uint64_t limited_index = path->delivered + path->bytes_in_transit;
  path->delivered_limited_index = limited_index ? limited_index : 1;
  path->last_sender_limited_time = pq_time(c, now);
  c->sender_app_limited = 1;
}

int ccd_step(void* ctl, const ccd_event* ev, ccd_snapshot* out)
{
  ctl_t* c = (ctl_t*)ctl;
  int ret = 0;
  c->err[0] = 0;
  if (ev->now_us < 0) {
    snprintf(c->err, sizeof(c->err), "picoquic adapter: negative time %lld", (long long)ev->now_us);
    return -1;
  }
  if (ev->kind != CCD_LOST && ev->kind != CCD_PERSISTENT_CONGESTION && ev->kind != CCD_ACKED)
    c->group_open = 0;
  if (ev->kind != CCD_PERSISTENT_CONGESTION) set_rtt(c, ev);
  switch (ev->kind) {
  case CCD_SENT:
    if (ev->n_packets != 1) {
      snprintf(c->err, sizeof(c->err), "picoquic adapter: sent event with %u packets", ev->n_packets);
      return -1;
    }
    on_sent(c, &ev->packets[0], (ev->flags & CCD_FLAG_APP_LIMITED) != 0, ev->now_us);
    break;
  case CCD_LOST:
    ret = on_lost(c, ev);
    break;
  case CCD_PERSISTENT_CONGESTION:
    ret = on_persistent_congestion(c, ev);
    break;
  case CCD_ACKED:
    ret = on_acked(c, ev);
    break;
  case CCD_APP_IDLE:
    on_app_idle(c, ev->now_us);
    break;
  case CCD_APP_DATA:
    break;
  default:
    snprintf(c->err, sizeof(c->err), "picoquic adapter: unknown event kind %u", ev->kind);
    return -1;
  }
  if (ret != 0) return ret;
  fill_snapshot(c, out);
  return 0;
}
