/*
 * ngtcp2's controller called directly, no adapter: the same ngtcp2_cc /
 * ngtcp2_rst calls, in the same order and with the same arguments, that
 * implementations/ngtcp2/adapter.c makes for this event stream.
 *
 *   ngtcp2_bare EVENTS.bin REPS [reno]
 *
 * Built from the same lib/ files with the adapter's CFLAGS (build.sh).
 * What the adapter does on top, and this loop does not:
 *   - the ABI: an indirect call into the .so, ccd_event validation (time
 *     order, bytes-in-flight cross-check, packet presence) and the snapshot
 *     written after every event (phase, CUBIC epoch/W_max/K);
 *   - rtt copied into ngtcp2_conn_stat on every event (here: on ACKs only,
 *     the only events that change it);
 *   - its retransmission-buffer stand-in (ngd_rtb: sorted array, binary
 *     search per packet, lost entries kept for spurious-loss detection and
 *     expired per event), a malloc per ACK for the acked list; here a ring
 *     indexed by packet number, lost entries dropped at once;
 *   - a loss is held back until its ACK in both, but the adapter also runs
 *     the loss-timer path on a scratch copy of the controller to report the
 *     CCD_LOST event's own snapshot.
 * The stream (bench_adapters.py) has no spurious loss, ECN or persistent
 * congestion, so those paths are not written here; this loop stops on them.
 */
#include <string.h>

#include "events.h"

#include <ngtcp2/ngtcp2.h>

#include "ngtcp2_cc.h"
#include "ngtcp2_conn_stat.h"
#include "ngtcp2_log.h"
#include "ngtcp2_macro.h"
#include "ngtcp2_rst.h"
#include "ngtcp2_rtb.h"

#define RING 16384 /* > packets outstanding at once (checked) */
#define MAX_LOST 64

typedef struct bare {
  ngtcp2_conn_stat cstat;
  ngtcp2_rst rst;
  ngtcp2_cc_cubic cubic;
  ngtcp2_cc_reno reno;
  ngtcp2_cc *cc;
  ngtcp2_log log;
  ngtcp2_rtb_entry ring[RING]; /* pktlen 0 = free slot */
  int64_t largest_acked;
  int64_t lost[MAX_LOST];
  size_t n_lost;
} bare;

static ngtcp2_tstamp ts_of(int64_t us) { return (ngtcp2_tstamp)us * NGTCP2_MICROSECONDS; }

static void init(bare *b, int reno, ngtcp2_duration initial_rtt, size_t mds) {
  ngtcp2_conn_stat *cstat = &b->cstat;
  memset(b, 0, sizeof(*b));
  /* as adapter.c ngd_cc_init (ngtcp2 conn.c:907-923, 1430-1443) */
  cstat->min_rtt = UINT64_MAX;
  cstat->smoothed_rtt = initial_rtt;
  cstat->rttvar = initial_rtt / 2;
  cstat->initial_rtt = initial_rtt;
  cstat->first_rtt_sample_ts = UINT64_MAX;
  cstat->loss_detection_timer = UINT64_MAX;
  cstat->max_tx_udp_payload_size = mds;
  cstat->cwnd = ngtcp2_cc_compute_initcwnd(mds);
  cstat->ssthresh = UINT64_MAX;
  cstat->congestion_recovery_start_ts = UINT64_MAX;
  cstat->send_quantum = 64 * 1024;
  memset(cstat->loss_time, 0xFF, sizeof(cstat->loss_time));
  memset(cstat->last_tx_pkt_ts, 0xFF, sizeof(cstat->last_tx_pkt_ts));
  ngtcp2_rst_init(&b->rst);
  if (reno) {
    ngtcp2_cc_reno_init(&b->reno, &b->log, cstat);
    b->cc = &b->reno.cc;
  } else {
    ngtcp2_cc_cubic_init(&b->cubic, &b->log, cstat, &b->rst);
    b->cc = &b->cubic.cc;
  }
  b->largest_acked = -1;
}

static ngtcp2_cc_pkt *cc_pkt(ngtcp2_cc_pkt *pkt, const ngtcp2_rtb_entry *ent) {
  return ngtcp2_cc_pkt_init(pkt, ent->hd.pkt_num, ent->pktlen, NGTCP2_PKTNS_ID_APPLICATION,
                            ent->ts, ent->rst.lost, ent->rst.tx_in_flight,
                            ent->rst.is_app_limited);
}

static void on_sent(bare *b, const ccd_event *ev, ngtcp2_tstamp ts) {
  const ccd_packet *p = &ev->packets[0];
  ngtcp2_conn_stat *cstat = &b->cstat;
  ngtcp2_rtb_entry *ent = &b->ring[p->pn % RING];
  ngtcp2_cc_pkt pkt;

  if (ent->pktlen) bench_die("ngtcp2_bare: RING too small");
  if ((ev->flags & CCD_FLAG_APP_LIMITED) || p->app_limited)
    b->rst.app_limited = ngtcp2_max(b->rst.delivered + cstat->bytes_in_flight, 1);
  memset(ent, 0, sizeof(*ent));
  ent->hd.pkt_num = (int64_t)p->pn;
  ent->ts = ts;
  ent->lost_ts = UINT64_MAX;
  ent->pktlen = p->bytes;
  ent->flags = NGTCP2_RTB_ENTRY_FLAG_ACK_ELICITING;
  if (b->cc->on_pkt_sent) {
    ngtcp2_cc_pkt_init(&pkt, ent->hd.pkt_num, ent->pktlen, NGTCP2_PKTNS_ID_APPLICATION, ts, 0, 0, 0);
    b->cc->on_pkt_sent(b->cc, cstat, &pkt);
  }
  cstat->bytes_in_flight += ent->pktlen;
  ngtcp2_rst_on_pkt_sent(&b->rst, ent, cstat);
  ngtcp2_rst_update_app_limited(&b->rst, cstat);
  if (cstat->bytes_in_flight >= cstat->cwnd) b->rst.is_cwnd_limited = 1;
}

static void on_ack(bare *b, const ccd_event *ev, ngtcp2_tstamp ts) {
  ngtcp2_conn_stat *cstat = &b->cstat;
  ngtcp2_cc *cc = b->cc;
  ngtcp2_cc_ack cc_ack = {.largest_pkt_sent_ts = UINT64_MAX, .rtt = UINT64_MAX};
  ngtcp2_cc_pkt pkt;
  uint32_t i;

  if (ev->n_spurious || (ev->flags & CCD_FLAG_ECN_CE) || ev->n_packets == 0)
    bench_die("ngtcp2_bare: unsupported ACK (spurious, ECN or empty)");
  /* the RFC 9002 estimate, as adapter.c ngd_set_rtt */
  cstat->latest_rtt = ts_of(ev->rtt.latest_us);
  cstat->smoothed_rtt = ts_of(ev->rtt.smoothed_us);
  cstat->rttvar = ts_of(ev->rtt.rttvar_us);
  cstat->min_rtt = ts_of(ev->rtt.min_us);
  if (cstat->first_rtt_sample_ts == UINT64_MAX) cstat->first_rtt_sample_ts = ts;

  int64_t largest = (int64_t)ev->packets[ev->n_packets - 1].pn;
  if (b->largest_acked < largest) b->largest_acked = largest;
  ngtcp2_rst_reset_rate_sample(&b->rst, cstat);
  for (i = 0; i < ev->n_packets; i++) {
    ngtcp2_rtb_entry *ent = &b->ring[ev->packets[i].pn % RING];
    if (b->largest_acked == ent->hd.pkt_num) cc_ack.largest_pkt_sent_ts = ent->ts;
    cstat->bytes_in_flight -= ent->pktlen;
  }
  if (cc_ack.largest_pkt_sent_ts != UINT64_MAX)
    cc_ack.rtt = ngtcp2_max(ts - cc_ack.largest_pkt_sent_ts, NGTCP2_NANOSECONDS);
  for (i = 0; i < ev->n_packets; i++) {
    ngtcp2_rtb_entry *ent = &b->ring[ev->packets[i].pn % RING];
    cc_ack.bytes_delivered += ent->pktlen;
    cc_ack.pkt_delivered = ent->rst.delivered;
    ngtcp2_rst_update_rate_sample(&b->rst, ent, ts);
    if (cc->on_pkt_acked) cc->on_pkt_acked(cc, cstat, cc_pkt(&pkt, ent), ts);
    ent->pktlen = 0;
  }
  ngtcp2_rst_on_ack_recv(&b->rst, cstat);
  if (b->n_lost) { /* ngtcp2_rtb_recv_ack -> rtb_detect_lost_pkt */
    ngtcp2_tstamp latest_ts = 0;
    int64_t largest_lost = -1;
    uint64_t bytes_lost = 0;
    for (size_t k = 0; k < b->n_lost; k++) {
      ngtcp2_rtb_entry *ent = &b->ring[b->lost[k] % RING];
      if (ent->hd.pkt_num > largest_lost) {
        largest_lost = ent->hd.pkt_num;
        latest_ts = ent->ts;
      }
      cstat->bytes_in_flight -= ent->pktlen;
      bytes_lost += ent->pktlen;
      b->rst.lost += ent->pktlen;
      if (cc->on_pkt_lost) cc->on_pkt_lost(cc, cstat, cc_pkt(&pkt, ent), ts);
      ent->pktlen = 0;
    }
    cc_ack.bytes_lost = bytes_lost;
    if (cc->congestion_event) cc->congestion_event(cc, cstat, latest_ts, &cc_ack, ts);
    b->n_lost = 0;
  }
  if (cc->on_ack_recv) cc->on_ack_recv(cc, cstat, &cc_ack, ts);
}

static void run(bare *b, const bench_events *e) {
  for (size_t i = 0; i < e->n; i++) {
    const ccd_event *ev = &e->ev[i];
    ngtcp2_tstamp ts = ts_of(ev->now_us);
    switch (ev->kind) {
    case CCD_SENT:
      on_sent(b, ev, ts);
      break;
    case CCD_ACKED:
      on_ack(b, ev, ts);
      break;
    case CCD_LOST: /* applied inside the next ACK, as ngtcp2 finds it there */
      if (b->n_lost + ev->n_packets > MAX_LOST) bench_die("ngtcp2_bare: too many losses");
      for (uint32_t k = 0; k < ev->n_packets; k++) b->lost[b->n_lost++] = (int64_t)ev->packets[k].pn;
      break;
    default:
      bench_die("ngtcp2_bare: unsupported event kind");
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) bench_die("usage: ngtcp2_bare EVENTS.bin REPS [reno]");
  bench_events e = bench_load(argv[1]);
  int reps = atoi(argv[2]);
  int reno = argc > 3 && strcmp(argv[3], "reno") == 0;
  bare *b = malloc(sizeof(bare));
  double best = 1e30;
  if (b == NULL) bench_die("out of memory");
  for (int r = 0; r < reps; r++) {
    init(b, reno, ts_of(333000), 1200);
    double t0 = bench_now();
    run(b, &e);
    double dt = bench_now() - t0;
    if (dt < best) best = dt;
  }
  bench_report(e.n, best, b->cstat.cwnd, b->cstat.ssthresh);
  return 0;
}
