/*
 * picoquic's controller called directly, no adapter: the same alg_notify
 * calls (and sender/ACK-path bookkeeping the controller reads), in the same
 * order, that implementations/picoquic/adapter.c makes for this stream.
 *
 *   picoquic_bare EVENTS.bin REPS [newreno]
 *
 * Built from the same picoquic files with the adapter's CFLAGS (build.sh);
 * like the adapter, cubic.c and newreno.c are compiled into this file.
 * What the adapter does on top, and this loop does not:
 *   - the ABI: an indirect call into the .so, event checks, and the
 *     snapshot written after every event;
 *   - a CCD_LOST arrives before its ACK: the adapter checkpoints the
 *     connection, path and CUBIC state (struct copies), notifies the loss at
 *     once (for the CCD_LOST snapshot), then at the ACK rolls back and
 *     notifies it again in picoquic's order; here the loss is only queued
 *     and notified once, inside the ACK, where picoquic detects it.
 * The stream (bench_adapters.py) has no spurious loss, ECN or persistent
 * congestion, so those paths are not written here; this loop stops on them.
 */
#include "picoquic_internal.h"
#include "cc_common.h"
#include "cubic.c"
#include "newreno.c"

#include "events.h"

void picoquic_estimate_max_path_bandwidth(picoquic_path_t* path_x, uint64_t send_time,
    uint64_t delivery_time);
void picoquic_refresh_path_quality_thresholds(picoquic_path_t* path_x) { (void)path_x; }

#define CHECKSUM 16u /* AEAD tag, as adapter.c PQ_CHECKSUM_OVERHEAD */
#define BASE 1000000000ll /* trace time 0 = 1000 s, as adapter.c */
#define MAX_LOST 64

typedef struct {
  picoquic_cnx_t cnx;
  picoquic_path_t path;
  picoquic_path_t* paths[1];
  const picoquic_congestion_algorithm_t* alg;
  ccd_packet lost[MAX_LOST];
  size_t n_lost;
} bare;

static uint64_t T(int64_t t) { return (uint64_t)(t + BASE); }
static uint64_t len_of(const ccd_packet* p) { return p->bytes > CHECKSUM ? p->bytes - CHECKSUM : 0; }

static void init(bare* b, int newreno, int64_t initial_rtt_us, uint32_t mds)
{
  /* as adapter.c ccd_open */
  memset(b, 0, sizeof(*b));
  b->paths[0] = &b->path;
  b->cnx.path = b->paths;
  b->cnx.nb_paths = 1;
  b->cnx.nb_path_alloc = 1;
  b->cnx.cnx_state = picoquic_state_ready;
  b->cnx.local_parameters.max_ack_delay = PICOQUIC_ACK_DELAY_MAX;
  picoquic_packet_context_t* pkt_ctx = &b->cnx.pkt_ctx[picoquic_packet_context_application];
  b->cnx.start_time = T(0);
  pkt_ctx->highest_acknowledged = UINT64_MAX;
  pkt_ctx->latest_time_acknowledged = b->cnx.start_time;
  pkt_ctx->highest_acknowledged_time = b->cnx.start_time;
  b->path.cnx = &b->cnx;
  b->path.smoothed_rtt = (uint64_t)initial_rtt_us;
  b->path.retransmit_timer = PICOQUIC_INITIAL_RETRANSMIT_TIMER;
  b->path.cwin = PICOQUIC_CWIN_INITIAL;
  picoquic_pacing_init(&b->path.pacing, T(0));
  b->path.send_mtu = mds;
  b->alg = newreno ? picoquic_newreno_algorithm : picoquic_cubic_algorithm;
  b->cnx.congestion_alg = b->alg;
  b->alg->alg_init(&b->path, NULL, T(0));
}

static void notify(bare* b, picoquic_congestion_notification_t n, picoquic_per_ack_state_t* st, int64_t now)
{
  b->alg->alg_notify(&b->cnx, &b->path, n, st, T(now));
}

static void on_sent(bare* b, const ccd_event* ev)
{
  const ccd_packet* p = &ev->packets[0];
  picoquic_path_t* path = &b->path;
  picoquic_packet_context_t* pkt_ctx = &b->cnx.pkt_ctx[picoquic_packet_context_application];
  int64_t now = ev->now_us;
  if (ev->flags & CCD_FLAG_APP_LIMITED) bench_die("picoquic_bare: app-limited sends not supported");
  if (p->pn + 1 > pkt_ctx->send_sequence) pkt_ctx->send_sequence = p->pn + 1;
  path->latest_sent_time = T(now);
  path->bytes_in_transit += p->bytes;
  path->is_cc_data_updated = 1;
  if (path->bytes_in_transit >= path->cwin) path->last_cwin_blocked_time = T(now);
  picoquic_update_pacing_after_send(path, p->bytes, T(now));
  path->last_sent_time = T(now);
  picoquic_per_ack_state_t st = { 0 };
  st.pc = picoquic_packet_context_application;
  path->last_cwin_blocked_time = T(now);
  notify(b, picoquic_congestion_notification_cwin_blocked, &st, now);
}

static void on_acked(bare* b, const ccd_event* ev)
{
  picoquic_path_t* path = &b->path;
  picoquic_packet_context_t* pkt_ctx = &b->cnx.pkt_ctx[picoquic_packet_context_application];
  int64_t now = ev->now_us;
  if (ev->n_spurious || (ev->flags & CCD_FLAG_ECN_CE) || ev->n_packets == 0)
    bench_die("picoquic_bare: unsupported ACK (spurious, ECN or empty)");

  const ccd_packet* top = &ev->packets[ev->n_packets - 1];
  if (top->pn > pkt_ctx->highest_acknowledged || pkt_ctx->highest_acknowledged == UINT64_MAX) {
    pkt_ctx->highest_acknowledged = top->pn;
    pkt_ctx->highest_acknowledged_time = T(now);
    if (pkt_ctx->latest_time_acknowledged < T(top->sent_us))
      pkt_ctx->latest_time_acknowledged = T(top->sent_us);
  }
  const ccd_packet* first = NULL;
  uint64_t data_acked = 0;
  for (uint32_t k = ev->n_packets; k-- > 0;) {
    const ccd_packet* p = &ev->packets[k];
    path->delivered += len_of(p);
    if (T(p->sent_us) > path->last_time_acked_data_frame_sent)
      path->last_time_acked_data_frame_sent = T(p->sent_us);
    if (first == NULL) first = p;
    data_acked += len_of(p);
    path->bytes_in_transit -= p->bytes;
  }
  uint64_t send_time = T(first->sent_us);
  uint64_t rtt_estimate = 0;
  if (T(now) > send_time) {
    uint64_t ack_delay = ev->ack_delay_us > 0 ? (uint64_t)ev->ack_delay_us : 0;
    rtt_estimate = T(now) - send_time;
    if (path->rtt_is_initialized && ack_delay > 0) {
      if (ack_delay > b->cnx.local_parameters.max_ack_delay) ack_delay = b->cnx.local_parameters.max_ack_delay;
      if (path->rtt_min + ack_delay < rtt_estimate) rtt_estimate -= ack_delay;
    }
  }
  path->rtt_sample = rtt_estimate;
  path->rtt_is_initialized = 1;
  picoquic_per_ack_state_t st = { 0 };
  st.pc = picoquic_packet_context_application;
  st.rtt_measurement = rtt_estimate;
  notify(b, picoquic_congestion_notification_rtt_measurement, &st, now);
  picoquic_estimate_max_path_bandwidth(path, send_time, T(now));
  for (size_t k = 0; k < b->n_lost; k++) { /* loss detection, frames.c:3099-3102 */
    const ccd_packet* p = &b->lost[k];
    picoquic_per_ack_state_t ls = { 0 };
    path->total_bytes_lost += len_of(p);
    ls.pc = picoquic_packet_context_application;
    ls.rtt_measurement = path->rtt_sample;
    ls.lost_packet_number = p->pn;
    ls.lost_packet_sent_time = T(p->sent_us);
    ls.nb_bytes_newly_lost = len_of(p);
    ls.is_app_limited = p->app_limited ? 1 : 0;
    notify(b, picoquic_congestion_notification_repeat, &ls, now);
    path->bytes_in_transit -= p->bytes;
  }
  b->n_lost = 0;
  if (path->rtt_sample > 0) {
    picoquic_per_ack_state_t as = { 0 };
    as.pc = picoquic_packet_context_application;
    as.rtt_measurement = path->rtt_sample;
    as.nb_bytes_acknowledged = data_acked;
    as.is_app_limited = first->app_limited ? 1 : 0;
    notify(b, picoquic_congestion_notification_acknowledgement, &as, now);
  }
}

static void run(bare* b, const bench_events* e)
{
  for (size_t i = 0; i < e->n; i++) {
    const ccd_event* ev = &e->ev[i];
    /* the harness's RFC 9002 estimate, as adapter.c set_rtt */
    b->path.smoothed_rtt = (uint64_t)ev->rtt.smoothed_us;
    b->path.rtt_variant = (uint64_t)ev->rtt.rttvar_us;
    b->path.rtt_min = (uint64_t)ev->rtt.min_us;
    switch (ev->kind) {
    case CCD_SENT:
      on_sent(b, ev);
      break;
    case CCD_ACKED:
      on_acked(b, ev);
      break;
    case CCD_LOST: /* notified inside the next ACK, where picoquic finds it */
      if (b->n_lost + ev->n_packets > MAX_LOST) bench_die("picoquic_bare: too many losses");
      for (uint32_t k = 0; k < ev->n_packets; k++) b->lost[b->n_lost++] = ev->packets[k];
      break;
    default:
      bench_die("picoquic_bare: unsupported event kind");
    }
  }
}

int main(int argc, char** argv)
{
  if (argc < 3) bench_die("usage: picoquic_bare EVENTS.bin REPS [newreno]");
  bench_events e = bench_load(argv[1]);
  int reps = atoi(argv[2]);
  int newreno = argc > 3 && strcmp(argv[3], "newreno") == 0;
  bare* b = calloc(1, sizeof(bare));
  double best = 1e30;
  uint64_t cwnd = 0, ssthresh = 0;
  for (int r = 0; r < reps; r++) {
    init(b, newreno, 333000, 1200);
    double t0 = bench_now();
    run(b, &e);
    double dt = bench_now() - t0;
    if (dt < best) best = dt;
    cwnd = b->path.cwin;
    ssthresh = newreno ? ((picoquic_newreno_state_t*)b->path.congestion_alg_state)->nrss.ssthresh
                       : ((picoquic_cubic_state_t*)b->path.congestion_alg_state)->ssthresh;
    b->alg->alg_delete(&b->path);
  }
  bench_report(e.n, best, cwnd, ssthresh);
  return 0;
}
