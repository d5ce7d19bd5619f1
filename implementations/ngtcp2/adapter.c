/*
 * ccdiff adapter for ngtcp2's congestion controllers (CUBIC, Reno).
 *
 * Drives lib/ngtcp2_cc.c and lib/ngtcp2_rst.c directly, with the state a
 * connection keeps for them (ngtcp2_conn_stat, ngtcp2_rst) and the few
 * retransmission-buffer facts they depend on (ngd_rtb.h).  Every call
 * mirrors what ngtcp2's own code does; "rtb.c:N" and "conn.c:N" below are
 * lib/ngtcp2_rtb.c and lib/ngtcp2_conn.c of ngtcp2 1.25.0.
 *
 * Time: ngtcp2_tstamp nanoseconds = virtual microseconds * 1000.
 *
 * Losses: ngtcp2 detects losses inside ngtcp2_rtb_recv_ack, after the ACK's
 * packets are removed and the rate sample is taken, and before on_ack_recv
 * (rtb.c:949-971).  ccdiff delivers CCD_LOST before the CCD_ACKED of the
 * same ACK, so a CCD_LOST is held back as "pending" and applied inside the
 * following CCD_ACKED at the same time, in ngtcp2's order.  The snapshot of
 * the CCD_LOST (and CCD_PERSISTENT_CONGESTION) event itself is computed on
 * a scratch copy as the loss-timer path would do it (rtb.c:1197
 * ngtcp2_rtb_detect_lost_pkt).  If anything other than an ACK at the same
 * time follows, the pending loss is committed through that timer path.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccdiff_adapter.h"

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/version.h>

#include "ngtcp2_cc.h"
#include "ngtcp2_conn_stat.h"
#include "ngtcp2_log.h"
#include "ngtcp2_macro.h"
#include "ngtcp2_rcvry.h"
#include "ngtcp2_rst.h"

#include "ngd_rtb.h"

#define NGD_EXPORT __attribute__((visibility("default")))

typedef enum ngd_algo { NGD_ALGO_CUBIC, NGD_ALGO_RENO } ngd_algo;

/* What ngtcp2_conn holds for congestion control (conn.c:1429-1443). */
typedef struct ngd_cc {
  ngd_algo algo;
  ngtcp2_conn_stat cstat;
  ngtcp2_rst rst;
  union {
    ngtcp2_cc_cubic cubic;
    ngtcp2_cc_reno reno;
  } u;
} ngd_cc;

/* Losses held back until the ACK that revealed them (see top). */
typedef struct ngd_loss {
  int active;
  int persistent;
  ngtcp2_tstamp ts;
  int64_t *pkt_nums;
  size_t n;
  size_t cap;
  uint64_t bytes;
} ngd_loss;

typedef struct ngd_ctl {
  ngd_cc cc;
  ngd_rtb rtb;
  ngd_loss pending;
  ngtcp2_log log; /* zeroed: ngtcp2 logging disabled (ngtcp2_log.h:170) */
  ngtcp2_duration initial_rtt;
  /* conn->remote.transport_params->max_ack_delay: the trace header's
     (ccd_config.max_ack_delay_us; NGTCP2_DEFAULT_MAX_ACK_DELAY, 25 ms, when
     the peer sends none) */
  ngtcp2_duration max_ack_delay;
  ngtcp2_tstamp clock_base; /* ngtcp2 time of trace time 0 */
  ngtcp2_tstamp last_ts;
  ngtcp2_rtb_entry **acked;  /* per-ACK scratch, grown, never shrunk */
  size_t acked_cap;
  char err[256];
} ngd_ctl;

/* Room for |n| acked entries, reused across ACKs: no allocation per ACK. */
static ngtcp2_rtb_entry **ngd_acked_buffer(ngd_ctl *ctl, size_t n) {
  ngtcp2_rtb_entry **p;
  if (n > ctl->acked_cap) {
    p = realloc(ctl->acked, n * sizeof(*p));
    if (p == NULL) {
      return NULL;
    }
    ctl->acked = p;
    ctl->acked_cap = n;
  }
  return ctl->acked;
}

static ngtcp2_cc *ngd_cc_iface(ngd_cc *c) {
  return c->algo == NGD_ALGO_CUBIC ? &c->u.cubic.cc : &c->u.reno.cc;
}

/* A copy whose CUBIC points to the copy's own rate sampler. */
static void ngd_cc_copy(ngd_cc *dst, const ngd_cc *src) {
  *dst = *src;
  if (dst->algo == NGD_ALGO_CUBIC) {
    dst->u.cubic.rst = &dst->rst;
  }
}

static int fail(ngd_ctl *ctl, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(ctl->err, sizeof(ctl->err), fmt, ap);
  va_end(ap);

  return -1;
}

/* A span of trace time (an RTT, a delay) in ngtcp2's nanoseconds. */
static ngtcp2_duration us_to_duration(int64_t us) {
  return (ngtcp2_duration)us * NGTCP2_MICROSECONDS;
}

/* A trace instant on ngtcp2's clock (ngtcp2.h:1073, nanoseconds).
   Applications pass a monotonic clock counted from boot, never near 0 once
   a connection exists; clock_base stands for that uptime
   (ccdiff_adapter.h).  With ts near 0, ngtcp2's sums such as
   epoch_start + ... compare differently than they ever do in a real
   connection. */
static ngtcp2_tstamp us_to_ts(const ngd_ctl *ctl, int64_t us) {
  return ctl->clock_base + (ngtcp2_tstamp)us * NGTCP2_MICROSECONDS;
}

/* An ngtcp2 instant back in trace time, for the snapshot. */
static int64_t ts_to_us(const ngd_ctl *ctl, ngtcp2_tstamp ts) {
  if (ts == UINT64_MAX) {
    return CCD_NO_TIME;
  }
  return ts >= ctl->clock_base
           ? (int64_t)((ts - ctl->clock_base) / NGTCP2_MICROSECONDS)
           : -(int64_t)((ctl->clock_base - ts) / NGTCP2_MICROSECONDS);
}

/* ---- options ---------------------------------------------------------- */

#define NGD_OPTIONS "cc=cubic|reno"

static int parse_options(const char *opts, ngd_algo *algo, char *err,
                         size_t errlen) {
  char buf[256], *tok, *save = NULL, *eq;

  *algo = NGD_ALGO_CUBIC;
  if (opts == NULL || *opts == '\0') {
    return 0;
  }
  if (strlen(opts) >= sizeof(buf)) {
    snprintf(err, errlen, "ngtcp2: options too long");
    return -1;
  }
  strcpy(buf, opts);

  for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    eq = strchr(tok, '=');
    if (eq == NULL || strncmp(tok, "cc", (size_t)(eq - tok)) != 0 ||
        eq - tok != 2) {
      snprintf(err, errlen, "ngtcp2: unknown option '%s'; accepted: %s", tok,
               NGD_OPTIONS);
      return -1;
    }
    if (strcmp(eq + 1, "cubic") == 0) {
      *algo = NGD_ALGO_CUBIC;
    } else if (strcmp(eq + 1, "reno") == 0) {
      *algo = NGD_ALGO_RENO;
    } else {
      snprintf(err, errlen, "ngtcp2: bad value '%s' for option cc; accepted: %s",
               eq + 1, NGD_OPTIONS);
      return -1;
    }
  }

  return 0;
}

/* ---- set-up ----------------------------------------------------------- */

/* conn.c:907-923 conn_reset_conn_stat_cc, then conn.c:1430-1443. */
static void ngd_cc_init(ngd_ctl *ctl, ngd_algo algo, size_t mds) {
  ngd_cc *c = &ctl->cc;
  ngtcp2_conn_stat *cstat = &c->cstat;

  memset(c, 0, sizeof(*c));
  c->algo = algo;

  cstat->latest_rtt = 0;
  cstat->min_rtt = UINT64_MAX;
  cstat->smoothed_rtt = ctl->initial_rtt;
  cstat->rttvar = ctl->initial_rtt / 2;
  cstat->initial_rtt = ctl->initial_rtt;
  cstat->first_rtt_sample_ts = UINT64_MAX;
  cstat->loss_detection_timer = UINT64_MAX;
  cstat->max_tx_udp_payload_size = mds;
  cstat->cwnd = ngtcp2_cc_compute_initcwnd(mds);
  cstat->ssthresh = UINT64_MAX;
  cstat->congestion_recovery_start_ts = UINT64_MAX;
  cstat->send_quantum = 64 * 1024;
  memset(cstat->loss_time, 0xFF, sizeof(cstat->loss_time));
  memset(cstat->last_tx_pkt_ts, 0xFF, sizeof(cstat->last_tx_pkt_ts));

  ngtcp2_rst_init(&c->rst);

  if (algo == NGD_ALGO_CUBIC) {
    ngtcp2_cc_cubic_init(&c->u.cubic, &ctl->log, cstat, &c->rst);
  } else {
    ngtcp2_cc_reno_init(&c->u.reno, &ctl->log, cstat);
  }
}

/* The harness's RFC 9002 estimator into cstat, as ngtcp2_conn_update_rtt
   (conn.c:13285) leaves it; no sample yet is min_rtt UINT64_MAX
   (conn.c:909). */
static void ngd_set_rtt(ngd_cc *c, const ccd_rtt *rtt, ngtcp2_tstamp ts) {
  ngtcp2_conn_stat *cstat = &c->cstat;

  cstat->latest_rtt = us_to_duration(rtt->latest_us);
  cstat->smoothed_rtt = us_to_duration(rtt->smoothed_us);
  cstat->rttvar = us_to_duration(rtt->rttvar_us);
  if (rtt->min_us > 0) {
    cstat->min_rtt = us_to_duration(rtt->min_us);
    if (cstat->first_rtt_sample_ts == UINT64_MAX) {
      cstat->first_rtt_sample_ts = ts; /* conn.c:13296 */
    }
  } else {
    cstat->min_rtt = UINT64_MAX;
    cstat->first_rtt_sample_ts = UINT64_MAX;
  }
}

/* ---- loss ------------------------------------------------------------- */

static int ngd_pending_has(const ngd_loss *pl, int64_t pkt_num) {
  size_t i;

  for (i = 0; i < pl->n; ++i) {
    if (pl->pkt_nums[i] == pkt_num) {
      return 1;
    }
  }
  return 0;
}

/* rtb.c:1050-1053 */
static size_t ngd_pkt_thres(const ngtcp2_conn_stat *cstat) {
  uint64_t n = cstat->bytes_in_flight / cstat->max_tx_udp_payload_size / 2;

  n = ngtcp2_max(n, NGTCP2_PKT_THRESHOLD);
  return (size_t)ngtcp2_min(n, 256);
}

/*
 * The lost-packet part of rtb_detect_lost_pkt (rtb.c:1118-1189) for the
 * pending losses, on |c|.  With |commit| the entries are marked lost in
 * the rtb (rtb.c:511) and the rtb is trimmed (rtb.c:1192); without it
 * |c| is a scratch copy and the rtb is left alone.
 */
static void ngd_declare_lost(ngd_ctl *ctl, ngd_cc *c, int commit,
                             ngtcp2_cc_ack *cc_ack, ngtcp2_tstamp ts) {
  ngtcp2_conn_stat *cstat = &c->cstat;
  ngtcp2_cc *cc = ngd_cc_iface(c);
  size_t pkt_thres = ngd_pkt_thres(cstat);
  ngtcp2_tstamp latest_ts = 0;
  int64_t largest = -1;
  uint64_t bytes_lost = 0;
  ngtcp2_rtb_entry *ent;
  ngtcp2_cc_pkt pkt;
  size_t i;

  for (i = 0; i < ctl->pending.n; ++i) {
    ent = ngd_rtb_find(&ctl->rtb, ctl->pending.pkt_nums[i]);
    /* rtb.c:1062-1068: latest_ts is the sent time of the largest lost */
    if (ent->hd.pkt_num > largest) {
      largest = ent->hd.pkt_num;
      latest_ts = ent->ts;
    }
    cstat->bytes_in_flight -= ent->pktlen; /* rtb.c:185 */
    bytes_lost += ent->pktlen;
    c->rst.lost += ent->pktlen; /* rtb.c:471 */
    if (cc->on_pkt_lost) {      /* rtb.c:473 */
      cc->on_pkt_lost(cc, cstat,
                      ngtcp2_cc_pkt_init(&pkt, ent->hd.pkt_num, ent->pktlen,
                                         NGTCP2_PKTNS_ID_APPLICATION, ent->ts,
                                         ent->rst.lost, ent->rst.tx_in_flight,
                                         ent->rst.is_app_limited),
                      ts);
    }
    if (commit) {
      ent->flags |= NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED; /* rtb.c:511 */
      ent->lost_ts = ts;
      ++ctl->rtb.num_lost_pkts;
    }
  }

  cc_ack->bytes_lost = bytes_lost; /* rtb.c:1156 */
  if (cc->congestion_event) {
    cc->congestion_event(cc, cstat, latest_ts, cc_ack, ts); /* rtb.c:1159 */
  }

  if (ctl->pending.persistent) {
    /* rtb.c:1178-1185 */
    cstat->min_rtt = UINT64_MAX;
    cstat->smoothed_rtt = ctl->initial_rtt;
    cstat->rttvar = ctl->initial_rtt / 2;
    cstat->first_rtt_sample_ts = UINT64_MAX;
    if (cc->on_persistent_congestion) {
      cc->on_persistent_congestion(cc, cstat, ts);
    }
  }

  if (commit) {
    ngd_rtb_remove_excessive_lost_pkt(&ctl->rtb, pkt_thres);
    ctl->pending.active = 0;
    ctl->pending.persistent = 0;
    ctl->pending.n = 0;
    ctl->pending.bytes = 0;
  }
}

/* The loss-timer path: ngtcp2_conn_on_loss_detection_timer (conn.c:13468)
   -> ngtcp2_rtb_detect_lost_pkt (rtb.c:1197), no ACK information. */
static void ngd_loss_timer(ngd_ctl *ctl, ngd_cc *c, int commit) {
  ngtcp2_cc_ack cc_ack = {
    .largest_pkt_sent_ts = UINT64_MAX,
    .rtt = UINT64_MAX,
  };

  ngd_declare_lost(ctl, c, commit, &cc_ack, ctl->pending.ts);
}

static int ngd_on_lost(ngd_ctl *ctl, const ccd_event *ev, ngtcp2_tstamp ts) {
  ngd_loss *pl = &ctl->pending;
  ngtcp2_rtb_entry *ent;
  int64_t *p;
  size_t i;

  /* A lost after persistent_congestion at the same time is a later loss
     detection (the trace orders it after the collapse, docs/trace-format.md);
     merged into the pending batch it would be applied before the collapse,
     which then erases the recovery period it starts.  Commit the collapsed
     batch first, through the timer path. */
  if (pl->active && pl->persistent) {
    ngd_loss_timer(ctl, &ctl->cc, 1);
  }

  if (pl->n + ev->n_packets > pl->cap) {
    p = realloc(pl->pkt_nums, (pl->n + ev->n_packets) * sizeof(*p));
    if (p == NULL) {
      return fail(ctl, "out of memory");
    }
    pl->pkt_nums = p;
    pl->cap = pl->n + ev->n_packets;
  }

  for (i = 0; i < ev->n_packets; ++i) {
    ent = ngd_rtb_find(&ctl->rtb, (int64_t)ev->packets[i].pn);
    if (ent == NULL ||
        (ent->flags & NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED)) {
      return fail(ctl, "lost pn %llu is not in flight",
                  (unsigned long long)ev->packets[i].pn);
    }
    if (ngd_pending_has(pl, ent->hd.pkt_num)) {
      return fail(ctl, "pn %llu declared lost twice",
                  (unsigned long long)ev->packets[i].pn);
    }
    pl->pkt_nums[pl->n++] = ent->hd.pkt_num;
    pl->bytes += ent->pktlen;
  }

  pl->active = pl->n > 0;
  pl->ts = ts;

  return 0;
}

/* ---- the application (ABI 3) ------------------------------------------ */

/* CCD_APP_IDLE: a write call found no application data to send.  conn.c:
   12123-12129 (conn_write_vmsg_wrapper) does, after every write: cwnd full ->
   is_cwnd_limited; else, nothing written from the application -> the
   connection is app-limited until what is in flight now is delivered (rst.c:
   76 then marks every packet sent meanwhile is_app_limited).  CCD_APP_DATA:
   the application writes to a stream; nothing reaches the controller until
   the next packet is sent. */
static int ngd_on_app_idle(ngd_ctl *ctl) {
  ngd_cc *c = &ctl->cc;
  ngtcp2_conn_stat *cstat = &c->cstat;

  if (cstat->bytes_in_flight >= cstat->cwnd) {
    c->rst.is_cwnd_limited = 1;
  } else {
    c->rst.app_limited = ngtcp2_max(c->rst.delivered + cstat->bytes_in_flight,
                                    1);
  }
  return 0;
}

/* ---- send ------------------------------------------------------------- */

static int ngd_on_sent(ngd_ctl *ctl, const ccd_event *ev, ngtcp2_tstamp ts) {
  ngd_cc *c = &ctl->cc;
  ngtcp2_conn_stat *cstat = &c->cstat;
  ngtcp2_cc *cc = ngd_cc_iface(c);
  const ccd_packet *p;
  ngtcp2_rtb_entry ent;
  ngtcp2_cc_pkt pkt;
  int rv;

  if (ev->n_packets != 1) {
    return fail(ctl, "sent event must carry exactly one packet");
  }
  p = &ev->packets[0];
  if (p->bytes == 0) {
    return fail(ctl, "sent pn %llu has zero bytes", (unsigned long long)p->pn);
  }

  /* conn.c:12125-12129: a write call that found nothing to send marks the
     connection app-limited until what is in flight now is delivered; such
     a call happened before a packet sent while app-limited. */
  if ((ev->flags & CCD_FLAG_APP_LIMITED) || p->app_limited) {
    c->rst.app_limited = ngtcp2_max(c->rst.delivered + cstat->bytes_in_flight,
                                    1);
  }

  memset(&ent, 0, sizeof(ent));
  ent.hd.pkt_num = (int64_t)p->pn;
  ent.ts = ts;
  ent.lost_ts = UINT64_MAX;
  ent.pktlen = p->bytes;
  ent.flags = NGTCP2_RTB_ENTRY_FLAG_ACK_ELICITING;

  if (cc->on_pkt_sent) { /* conn.c:1920-1926 */
    cc->on_pkt_sent(cc, cstat,
                    ngtcp2_cc_pkt_init(&pkt, ent.hd.pkt_num, ent.pktlen,
                                       NGTCP2_PKTNS_ID_APPLICATION, ts, 0, 0,
                                       0));
  }

  /* rtb.c:129-137 rtb_on_add */
  cstat->bytes_in_flight += ent.pktlen;
  ngtcp2_rst_on_pkt_sent(&c->rst, &ent, cstat);
  ngtcp2_rst_update_app_limited(&c->rst, cstat);

  rv = ngd_rtb_add(&ctl->rtb, &ent);
  if (rv != 0) {
    cstat->bytes_in_flight -= ent.pktlen;
    return fail(ctl, rv == -1 ? "sent pn %llu is not above earlier ones"
                              : "out of memory at pn %llu",
                (unsigned long long)p->pn);
  }

  if (cstat->bytes_in_flight >= cstat->cwnd) {
    c->rst.is_cwnd_limited = 1; /* conn.c:12123-12124 */
  }

  return 0;
}

/* ---- ACK -------------------------------------------------------------- */

/* Newly acknowledged entries, ascending: the ACK's packets plus the
   spurious ones ngtcp2 still keeps (evicted ones are not found by the ACK
   ranges, rtb.c:846-900). */
static int ngd_collect_acked(ngd_ctl *ctl, const ccd_event *ev,
                             ngtcp2_rtb_entry **acked, size_t *pn_acked,
                             int64_t *plargest) {
  size_t i = 0, j = 0, n = 0;
  const ccd_packet *p;
  ngtcp2_rtb_entry *ent;
  int spurious;

  *plargest = -1;
  while (i < ev->n_packets || j < ev->n_spurious) {
    spurious = i == ev->n_packets ||
               (j < ev->n_spurious && ev->spurious[j].pn < ev->packets[i].pn);
    p = spurious ? &ev->spurious[j++] : &ev->packets[i++];
    *plargest = ngtcp2_max(*plargest, (int64_t)p->pn);
    ent = ngd_rtb_find(&ctl->rtb, (int64_t)p->pn);
    if (spurious) {
      if (ent && (ent->flags & NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED)) {
        acked[n++] = ent;
      }
      continue;
    }
    if (ent == NULL ||
        (ent->flags & NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED) ||
        ngd_pending_has(&ctl->pending, ent->hd.pkt_num)) {
      return fail(ctl, "acked pn %llu is not in flight",
                  (unsigned long long)p->pn);
    }
    acked[n++] = ent;
  }
  *pn_acked = n;

  return 0;
}

/* ngtcp2_rtb_recv_ack (rtb.c:792-983), with the pending losses standing in
   for rtb_detect_lost_pkt's finding. */
static int ngd_on_ack(ngd_ctl *ctl, const ccd_event *ev, ngtcp2_tstamp ts) {
  ngd_cc *c = &ctl->cc;
  ngtcp2_conn_stat *cstat = &c->cstat;
  ngtcp2_cc *cc = ngd_cc_iface(c);
  ngtcp2_cc_ack cc_ack = {
    .largest_pkt_sent_ts = UINT64_MAX,
    .rtt = UINT64_MAX,
  };
  size_t num_lost_pkts = ctl->rtb.num_lost_pkts; /* rtb.c:812 */
  int verify_ecn = 0;
  ngtcp2_rtb_entry **acked, *ent;
  ngtcp2_cc_pkt pkt;
  int64_t largest_ack;
  size_t i, num_acked = 0;

  acked = ngd_acked_buffer(ctl, ev->n_packets + ev->n_spurious + 1);
  if (acked == NULL) {
    return fail(ctl, "out of memory");
  }
  if (ngd_collect_acked(ctl, ev, acked, &num_acked, &largest_ack) != 0) {
    return -1;
  }

  if (ctl->pending.active && num_acked == 0) {
    /* rtb.c:953: no loss detection without newly acked packets, so the
       loss came from the timer. */
    ngd_loss_timer(ctl, c, 1);
    num_lost_pkts = ctl->rtb.num_lost_pkts;
  }

  if (ctl->rtb.largest_acked_tx_pkt_num < largest_ack) { /* rtb.c:825 */
    ctl->rtb.largest_acked_tx_pkt_num = largest_ack;
    verify_ecn = 1;
  }

  ngtcp2_rst_reset_rate_sample(&c->rst, cstat); /* rtb.c:829 */

  /* rtb.c:847-900 remove the acked entries from the rtb */
  for (i = 0; i < num_acked; ++i) {
    ent = acked[i];
    if (ctl->rtb.largest_acked_tx_pkt_num == ent->hd.pkt_num) {
      cc_ack.largest_pkt_sent_ts = ent->ts; /* rtb.c:863 */
    }
    if (!(ent->flags & NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED)) {
      cstat->bytes_in_flight -= ent->pktlen; /* rtb.c:183-185 */
    }
  }

  if (cc_ack.largest_pkt_sent_ts != UINT64_MAX) { /* rtb.c:904-906 */
    cc_ack.rtt =
      ngtcp2_max(ts - cc_ack.largest_pkt_sent_ts, NGTCP2_NANOSECONDS);
  }

  /* rtb.c:912-935, in ascending packet number order */
  for (i = 0; i < num_acked; ++i) {
    ent = acked[i];
    cc_ack.bytes_delivered += ent->pktlen;
    cc_ack.pkt_delivered = ent->rst.delivered;
    ngtcp2_rst_update_rate_sample(&c->rst, ent, ts); /* rtb.c:730 */
    if (cc->on_pkt_acked) {                          /* rtb.c:732 */
      cc->on_pkt_acked(cc, cstat,
                       ngtcp2_cc_pkt_init(&pkt, ent->hd.pkt_num, ent->pktlen,
                                          NGTCP2_PKTNS_ID_APPLICATION, ent->ts,
                                          ent->rst.lost, ent->rst.tx_in_flight,
                                          ent->rst.is_app_limited),
                       ts);
    }
    ngd_rtb_remove(&ctl->rtb, ent);
  }

  if (cc->on_spurious_congestion && num_lost_pkts &&
      ctl->rtb.num_lost_pkts == 0) { /* rtb.c:949-952 */
    cc->on_spurious_congestion(cc, cstat, ts);
  }

  if (num_acked) { /* rtb.c:954-962 */
    ngtcp2_rst_on_ack_recv(&c->rst, cstat);
    if (ctl->pending.active) {
      ngd_declare_lost(ctl, c, 1, &cc_ack, ts);
    } else {
      ngd_rtb_remove_excessive_lost_pkt(&ctl->rtb, ngd_pkt_thres(cstat));
    }
  }

  /* rtb.c:965-967 -> conn_verify_ecn rtb.c:776-780 */
  if (verify_ecn && (ev->flags & CCD_FLAG_ECN_CE) && cc->congestion_event &&
      cc_ack.largest_pkt_sent_ts != UINT64_MAX) {
    cc->congestion_event(cc, cstat, cc_ack.largest_pkt_sent_ts, &cc_ack, ts);
  }

  if (cc->on_ack_recv) { /* rtb.c:969-971 */
    cc->on_ack_recv(cc, cstat, &cc_ack, ts);
  }

  return 0;
}

/* ---- snapshot --------------------------------------------------------- */

/*
 * Phase, as ngtcp2 sees itself:
 * - recovery: a packet sent now would count as sent during recovery
 *   (cc.c:113-117 in_congestion_recovery(cstat, now));
 * - app_limited: CUBIC in congestion avoidance with an app-limited period
 *   open (cc.c:402-408, current.app_limited_start_ts set);
 * - slow start: cwnd < ssthresh (cc.c:130, cc.c:332);
 * - congestion avoidance otherwise.
 */
static uint32_t ngd_phase(const ngd_cc *c, ngtcp2_tstamp ts) {
  const ngtcp2_conn_stat *cstat = &c->cstat;

  if (cstat->congestion_recovery_start_ts != UINT64_MAX &&
      ts <= cstat->congestion_recovery_start_ts) {
    return CCD_PHASE_RECOVERY;
  }
  if (cstat->cwnd < cstat->ssthresh) {
    return CCD_PHASE_SLOW_START;
  }
  if (c->algo == NGD_ALGO_CUBIC &&
      c->u.cubic.current.app_limited_start_ts != UINT64_MAX) {
    return CCD_PHASE_APP_LIMITED;
  }
  return CCD_PHASE_CONGESTION_AVOIDANCE;
}

static void ngd_snapshot(const ngd_ctl *ctl, const ngd_cc *c,
                         ngtcp2_tstamp ts, ccd_snapshot *out) {
  const ngtcp2_conn_stat *cstat = &c->cstat;
  const ngtcp2_cubic_vars *v;

  memset(out, 0, sizeof(*out));
  out->cwnd = cstat->cwnd;
  out->ssthresh = cstat->ssthresh == UINT64_MAX ? CCD_NONE : cstat->ssthresh;
  out->bytes_in_flight = cstat->bytes_in_flight;
  out->phase = ngd_phase(c, ts);
  out->recovery_start_us = ts_to_us(ctl, cstat->congestion_recovery_start_ts);
  out->epoch_start_us = CCD_NO_TIME;
  out->w_max_bytes = NAN;
  out->k_us = NAN;

  if (c->algo != NGD_ALGO_CUBIC) {
    return;
  }
  v = &c->u.cubic.current;
  if (v->epoch_start == UINT64_MAX) {
    return;
  }
  /* cc.c:416-420: t = ts - app_limited_duration - epoch_start, so the
     epoch in effect is epoch_start shifted by app_limited_duration. */
  out->epoch_start_us = ts_to_us(ctl, v->epoch_start + v->app_limited_duration);
  out->w_max_bytes = (double)v->w_max;
  /* cc.h:299 k_m is K in seconds with 10 fractional bits (cc.c:521) */
  out->k_us = (double)v->k_m * 1e6 / 1024.0;
}

/* ---- ABI -------------------------------------------------------------- */

NGD_EXPORT uint32_t ccd_abi_version(void) { return CCD_ABI_VERSION; }

NGD_EXPORT const char *ccd_describe(void) {
  return "ngtcp2 " NGTCP2_VERSION " cubic; options: " NGD_OPTIONS;
}

NGD_EXPORT void *ccd_open(const ccd_config *cfg, char *err, size_t err_len) {
  ngd_ctl *ctl;
  ngd_algo algo;
  char dummy[1];

  if (err == NULL || err_len == 0) {
    err = dummy;
    err_len = sizeof(dummy);
  }
  if (cfg == NULL || cfg->max_datagram_size == 0 || cfg->initial_rtt_us <= 0) {
    snprintf(err, err_len,
             "ngtcp2: need max_datagram_size > 0 and initial_rtt_us > 0");
    return NULL;
  }
  if (cfg->clock_base_us <= 0 || cfg->clock_base_us > CCD_MAX_CLOCK_BASE_US) {
    snprintf(err, err_len, "ngtcp2: clock_base_us %lld is not in 1..%lld",
             (long long)cfg->clock_base_us, (long long)CCD_MAX_CLOCK_BASE_US);
    return NULL;
  }
  if (parse_options(cfg->options, &algo, err, err_len) != 0) {
    return NULL;
  }

  ctl = calloc(1, sizeof(*ctl));
  if (ctl == NULL) {
    snprintf(err, err_len, "ngtcp2: out of memory");
    return NULL;
  }
  ctl->initial_rtt = us_to_duration(cfg->initial_rtt_us);
  ctl->max_ack_delay = us_to_duration(cfg->max_ack_delay_us);
  ctl->clock_base = us_to_duration(cfg->clock_base_us);
  ctl->last_ts = ctl->clock_base;
  ngd_rtb_init(&ctl->rtb);
  ngd_cc_init(ctl, algo, cfg->max_datagram_size);

  return ctl;
}

/* ngtcp2_conn_handle_expiry (conn.c:11390): stale lost entries go
   (conn.c:11507-11519, 3 * PTO with the peer's max_ack_delay), then the
   loss timer fires for a pending loss nobody acknowledged. */
static void ngd_handle_expiry(ngd_ctl *ctl, const ccd_event *ev,
                              ngtcp2_tstamp ts) {
  const ngtcp2_conn_stat *cstat = &ctl->cc.cstat;
  ngtcp2_duration pto =
    cstat->smoothed_rtt + ngtcp2_max(4 * cstat->rttvar, NGTCP2_GRANULARITY) +
    ctl->max_ack_delay; /* conn.c compute_pto */
  int same_burst;

  ngd_rtb_remove_expired_lost_pkt(&ctl->rtb, pto * 3, ts);

  if (!ctl->pending.active) {
    return;
  }
  /* Only recv-path events (ACK, loss, persistent congestion) share a burst;
     a send or an application event comes from the write path, after it. */
  same_burst = ctl->pending.ts == ts &&
               (ev->kind == CCD_ACKED || ev->kind == CCD_LOST ||
                ev->kind == CCD_PERSISTENT_CONGESTION);
  if (!same_burst) {
    ngd_loss_timer(ctl, &ctl->cc, 1);
  }
}

static int ngd_check_event(ngd_ctl *ctl, const ccd_event *ev) {
  const ngtcp2_conn_stat *cstat = &ctl->cc.cstat;
  uint64_t bif = cstat->bytes_in_flight - ctl->pending.bytes;

  if (ev->n_packets && ev->packets == NULL) {
    return fail(ctl, "event without its packets");
  }
  if (ev->n_spurious && ev->spurious == NULL) {
    return fail(ctl, "event without its spurious packets");
  }
  if (ev->kind == CCD_PERSISTENT_CONGESTION &&
      (!ctl->pending.active || ctl->pending.ts != us_to_ts(ctl, ev->now_us))) {
    return fail(ctl, "persistent_congestion must follow lost at the same time");
  }
  if (ev->bytes_in_flight != bif) {
    return fail(ctl, "bytes in flight: harness %llu, ngtcp2 %llu",
                (unsigned long long)ev->bytes_in_flight,
                (unsigned long long)bif);
  }

  return 0;
}

NGD_EXPORT int ccd_step(void *p, const ccd_event *ev, ccd_snapshot *out) {
  ngd_ctl *ctl = p;
  ngtcp2_tstamp ts;
  ngd_cc scratch;
  int rv;

  if (ev->now_us < 0 || us_to_ts(ctl, ev->now_us) < ctl->last_ts) {
    return fail(ctl, "time %lld is negative or goes backwards",
                (long long)ev->now_us);
  }
  ts = us_to_ts(ctl, ev->now_us);

  ngd_handle_expiry(ctl, ev, ts);
  if (ngd_check_event(ctl, ev) != 0) {
    return -1;
  }
  ctl->last_ts = ts;
  ngd_set_rtt(&ctl->cc, &ev->rtt, ts);

  switch (ev->kind) {
  case CCD_SENT:
    rv = ngd_on_sent(ctl, ev, ts);
    break;
  case CCD_ACKED:
    rv = ngd_on_ack(ctl, ev, ts);
    break;
  case CCD_LOST:
    rv = ngd_on_lost(ctl, ev, ts);
    break;
  case CCD_PERSISTENT_CONGESTION:
    ctl->pending.persistent = 1;
    rv = 0;
    break;
  case CCD_APP_IDLE:
    rv = ngd_on_app_idle(ctl);
    break;
  case CCD_APP_DATA:
    rv = 0;
    break;
  default:
    return fail(ctl, "unknown event kind %u", ev->kind);
  }
  if (rv != 0) {
    return rv;
  }

  if (ctl->pending.active) {
    /* What the loss timer would leave; the ACK redoes it in order. */
    ngd_cc_copy(&scratch, &ctl->cc);
    ngd_loss_timer(ctl, &scratch, 0);
    ngd_snapshot(ctl, &scratch, ts, out);
  } else {
    ngd_snapshot(ctl, &ctl->cc, ts, out);
  }

  return 0;
}

NGD_EXPORT const char *ccd_last_error(void *p) {
  return ((ngd_ctl *)p)->err;
}

NGD_EXPORT void ccd_close(void *p) {
  ngd_ctl *ctl = p;

  if (ctl == NULL) {
    return;
  }
  ngd_rtb_free(&ctl->rtb);
  free(ctl->pending.pkt_nums);
  free(ctl->acked);
  free(ctl);
}
