/*
 * ccdiff adapter for Linux's TCP CUBIC (net/ipv4/tcp_cubic.c) and Reno
 * (net/ipv4/tcp_cong.c), ABI version 3 (implementations/include/ccdiff_adapter.h).
 *
 * The kernel's own controller code runs unmodified in user space: tcp_cubic.c
 * is #included whole (its tcp_congestion_ops and module parameters are static),
 * and tcp_cong.c's tcp_slow_start .. tcp_reno block is copied verbatim by
 * build.sh.  They run against shim/kshim.h, a struct tcp_sock holding only the
 * fields they read.  This file is the caller: it does, per ccdiff event, what
 * tcp_output.c and tcp_input.c do around the congestion_ops callbacks, in their
 * order.  Line numbers are Linux 6.12.117 (Debian linux-source-6.12
 * 6.12.117-1~deb12u1); the same functions in 6.1.176 are named alongside.
 *
 * Units.  Linux counts segments: snd_cwnd, snd_ssthresh, packets_out are
 * packets of mss_cache bytes, and an ACK grows the window by packets acked,
 * whatever their size.  One ccdiff packet is one segment of the trace's
 * max_datagram_size (= mss_cache); the snapshot reports bytes (segments x
 * max_datagram_size).  The sequence space (snd_una, snd_nxt, high_seq, HyStart's
 * end_seq) is bytes: each packet takes its size.
 *
 * Clocks.  jiffies = clock_base * HZ / 1e6 + t * HZ / 1e6 (ticks at multiples of
 * 1/HZ of trace time) and tcp_mstamp = clock_base + t (µs), set before every
 * callback.  HZ is 250 by default, Debian's kernel
 * configuration (CONFIG_HZ_250=y, debian/config/config of the linux source
 * package); hz= picks another.
 *
 * Event mapping (the caller code mirrored, 6.12.117):
 *   CCD_SENT   tcp_event_data_sent (tcp_output.c:163-175): CA_EVENT_TX_START when
 *              tcp_packets_in_flight() == 0, then lsndtime = now; then the
 *              packet is out (tcp_event_new_data_sent) and tcp_write_xmit's
 *              tail (tcp_output.c:2867) calls tcp_cwnd_validate
 *              (tcp_output.c:1920-1935) with is_cwnd_limited = the sender was
 *              cwnd-limited (the trace's app_limited flag clear) or in flight >=
 *              cwnd.
 *   CCD_ACKED  tcp_ack (tcp_input.c:3964-4124): snd_una advances; then
 *              tcp_clean_rtx_queue's pkts_acked (tcp_input.c:3530-3537) with
 *              ca_rtt_us = now - send time of the newest acknowledged packet
 *              (tcp_input.c:3472), -1 when nothing new is acked; then
 *              tcp_fastretrans_alert's state exit once high_seq is acknowledged
 *              (tcp_input.c:3079, "D. Check state exit conditions") and an ECE
 *              entering CWR (tcp_try_to_open, tcp_input.c:2802); then
 *              tcp_cong_control (tcp_input.c:3616-3634): cong_avoid with the
 *              packets newly delivered unless in CWR/Recovery, and
 *              tcp_update_pacing_rate (tcp_input.c:952-983), which HyStart's
 *              ACK-train threshold reads back (hystart_ack_delay).
 *   CCD_LOST   loss detection (RACK in tcp_fastretrans_alert) entering
 *              recovery: tcp_enter_recovery (tcp_input.c:2916-2940) ->
 *              tcp_init_cwnd_reduction (tcp_input.c:2709-2720: high_seq =
 *              snd_nxt, ssthresh = ops->ssthresh) -> tcp_set_ca_state(Recovery).
 *              Losses inside Recovery or Loss change nothing (one reduction per
 *              window of data, until high_seq is acknowledged).
 *   CCD_PERSISTENT_CONGESTION  the retransmission timeout: tcp_enter_loss
 *              (tcp_input.c:2196-2232): ssthresh only if not already reduced in
 *              this window, cwnd = packets in flight + 1, set_state(Loss)
 *              (cubictcp_state resets CUBIC and HyStart), high_seq = snd_nxt.
 *   CCD_APP_IDLE / CCD_APP_DATA  nothing: Linux learns idleness from sends
 *              (TX_START, tcp_cwnd_validate), not from the application.
 * Not mirrored (docs/linux-cross-check.md, profile.toml): PRR
 * (tcp_cwnd_reduction, tcp_input.c:2724-2747) -- cwnd is set to ssthresh when
 * recovery starts, where tcp_end_cwnd_reduction lands it at the end; undo
 * (tcp_try_undo_*, DSACK / timestamps); F-RTO; Linux's own RTT estimator (srtt_us for
 * the pacing rate is the harness's RFC 9002 smoothed RTT).  Losses are applied
 * at the CCD_LOST event (before the same instant's ACK), not inside it.
 * net.ipv4.tcp_slow_start_after_idle (tcp_cwnd_restart, tcp_output.c:144-160;
 * tcp_cwnd_application_limited, tcp_output.c:1902-1918) runs only with
 * slow_start_after_idle=on: Linux's sysctl default is 1, but it is off by default
 * here so that tcp_cubic.c's own idle rule is what is compared.
 */
#include "kshim.h"
#include <net/tcp.h>

unsigned long ccdl_hz = 250;
unsigned long jiffies;

#include "tcp_cubic.c"
#include "tcp_cong_part.c"

#include "ccdiff_adapter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef CCDL_KERNEL_VERSION
#define CCDL_KERNEL_VERSION "unknown"
#endif

/* sysctl defaults (net/ipv4/tcp_ipv4.c tcp_sk_init): tcp_pacing_ss_ratio 200,
 * tcp_pacing_ca_ratio 120; GSO_LEGACY_MAX_SIZE 65536 (include/linux/netdevice.h)
 * is sk_gso_max_size on a device without BIG TCP. */
#define LX_PACING_SS_RATIO 200
#define LX_PACING_CA_RATIO 120
#define LX_GSO_MAX_SIZE 65536
/* TCP_TIMEOUT_INIT (include/net/tcp.h): the RTO before any sample, jiffies. */
#define LX_TIMEOUT_INIT_US 1000000

typedef struct {
  uint64_t pn;
  u32 seq;
  int64_t sent_us;
  uint32_t bytes;
  int64_t lost_us;  /* declared lost at (a hole in the sequence space), or -1 */
  int has_rtx;      /* a hole: a later packet carries its retransmission */
  uint64_t rtx_pn;  /* ... that packet's number */
} lx_pkt;

typedef struct {
  struct tcp_sock tp;             /* first: sk == &tp */
  const struct tcp_congestion_ops* ops;
  int is_cubic;
  /* Module parameters of tcp_cubic.c (its statics; set before every call,
   * since controllers in one process may differ) and HZ. */
  int hystart_on, friendliness_on, fast_conv_on;
  int ssai;                       /* net.ipv4.tcp_slow_start_after_idle */
  unsigned long hz;
  uint32_t mds;
  int64_t base;                   /* µs of the stack clock at trace time 0 */
  lx_pkt* out;                    /* unacknowledged packets (and lost holes), send order */
  size_t n_lost;                  /* holes among them */
  size_t n_out, cap_out;
  int64_t recovery_start;         /* trace µs of the last Recovery/CWR entry */
  char err[256];
} lx_ctl;

#define SK(c) ((struct sock*)&(c)->tp)

uint32_t ccd_abi_version(void) { return CCD_ABI_VERSION; }

const char* ccd_describe(void)
{
  return "linux " CCDL_KERNEL_VERSION " tcp_cubic; options: cc=cubic|reno, hystart=on|off, "
         "hz=100|250|300|1000, tcp_friendliness=on|off, fast_convergence=on|off, "
         "slow_start_after_idle=off|on";
}

/* The clock and the module parameters, before any call into the kernel code. */
static uint64_t base_jiffies(const lx_ctl* c)
{
  return (uint64_t)c->base * c->hz / 1000000u;
}

static void lx_enter(lx_ctl* c, int64_t now_us)
{
  ccdl_hz = c->hz;
  /* The jiffy clock ticks at trace times that are multiples of 1/HZ: its phase is
   * set by trace time 0, not by the clock base, so that a verdict (and every
   * snapshot) is the same under any clock base (tests/adapters/test_clock.py);
   * where a real kernel's ticks fall relative to a connection is arbitrary. */
  jiffies = (unsigned long)(base_jiffies(c) + (uint64_t)now_us * c->hz / 1000000u);
  c->tp.tcp_mstamp = (uint64_t)(c->base + now_us);
  hystart = c->hystart_on;
  tcp_friendliness = c->friendliness_on;
  fast_convergence = c->fast_conv_on;
}

static int64_t jiffies_to_trace_us(const lx_ctl* c, u32 j)
{
  /* The jiffy's first microsecond in trace time: never after the event that
   * stamped it.  The bits above tcp_jiffies32's 32 come from now. */
  uint64_t now_j = jiffies;
  uint64_t full = (now_j & ~(uint64_t)0xffffffffu) | j;
  if (full > now_j) full -= (uint64_t)1 << 32;
  return ((int64_t)full - (int64_t)base_jiffies(c)) * 1000000 / (int64_t)c->hz;
}

static int on_off(const char* v, int* out)
{
  if (strcmp(v, "on") == 0) { *out = 1; return 0; }
  if (strcmp(v, "off") == 0) { *out = 0; return 0; }
  return -1;
}

static int parse_options(lx_ctl* c, const char* opts, char* err, size_t err_len)
{
  static const char accepted[] = "cc=cubic|reno, hystart=on|off, hz=100|250|300|1000, "
                                 "tcp_friendliness=on|off, fast_convergence=on|off, "
                                 "slow_start_after_idle=off|on";
  c->is_cubic = 1;
  c->hystart_on = 1;      /* tcp_cubic.c: hystart = 1 */
  c->friendliness_on = 1; /* tcp_friendliness = 1 */
  c->fast_conv_on = 1;    /* fast_convergence = 1 */
  c->hz = 250;
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
        snprintf(err, err_len, "linux: option '%s' is not key=value (accepted: %s)", item, accepted);
        return -1;
      }
      *eq = 0;
      const char* v = eq + 1;
      int bad = 0;
      if (strcmp(item, "cc") == 0) {
        if (strcmp(v, "cubic") == 0) c->is_cubic = 1;
        else if (strcmp(v, "reno") == 0) c->is_cubic = 0;
        else bad = 1;
      } else if (strcmp(item, "hystart") == 0) {
        bad = on_off(v, &c->hystart_on) != 0;
      } else if (strcmp(item, "tcp_friendliness") == 0) {
        bad = on_off(v, &c->friendliness_on) != 0;
      } else if (strcmp(item, "fast_convergence") == 0) {
        bad = on_off(v, &c->fast_conv_on) != 0;
      } else if (strcmp(item, "slow_start_after_idle") == 0) {
        bad = on_off(v, &c->ssai) != 0;
      } else if (strcmp(item, "hz") == 0) {
        /* The HZ values Kconfig offers (kernel/Kconfig.hz). */
        if (strcmp(v, "100") == 0) c->hz = 100;
        else if (strcmp(v, "250") == 0) c->hz = 250;
        else if (strcmp(v, "300") == 0) c->hz = 300;
        else if (strcmp(v, "1000") == 0) c->hz = 1000;
        else bad = 1;
      } else {
        snprintf(err, err_len, "linux: unknown option '%s' (accepted: %s)", item, accepted);
        return -1;
      }
      if (bad) {
        snprintf(err, err_len, "linux: option %s: unknown value '%s' (accepted: %s)", item, v, accepted);
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
  if (err && err_len) err[0] = 0;
  if (cfg == NULL || cfg->max_datagram_size == 0) {
    snprintf(err, err_len, "linux: max_datagram_size must be > 0");
    return NULL;
  }
  if (cfg->clock_base_us <= 0 || cfg->clock_base_us > CCD_MAX_CLOCK_BASE_US) {
    snprintf(err, err_len, "linux: clock_base_us %lld is not in 1..%lld",
             (long long)cfg->clock_base_us, (long long)CCD_MAX_CLOCK_BASE_US);
    return NULL;
  }
  lx_ctl* c = (lx_ctl*)calloc(1, sizeof(lx_ctl));
  if (c == NULL) {
    snprintf(err, err_len, "linux: out of memory");
    return NULL;
  }
  if (parse_options(c, cfg->options, err, err_len) != 0) {
    free(c);
    return NULL;
  }
  c->mds = cfg->max_datagram_size;
  c->base = cfg->clock_base_us;
  c->recovery_start = CCD_NO_TIME;
  /* module_init: the per-module constants (beta_scale, cube_rtt_scale,
   * cube_factor); they depend on no parameter ccdiff varies. */
  cubictcp_register();
  c->ops = c->is_cubic ? &cubictcp : &tcp_reno;

  struct tcp_sock* tp = &c->tp;
  struct sock* sk = SK(c);
  lx_enter(c, 0);
  /* tcp_init_sock (net/ipv4/tcp.c): IW10, infinite ssthresh, no clamp;
   * the connection's first sequence number is arbitrary: one that wraps soon
   * keeps after()/before() honest. */
  tp->snd_cwnd = TCP_INIT_CWND;
  tp->snd_ssthresh = TCP_INFINITE_SSTHRESH;
  tp->snd_cwnd_clamp = ~0u;
  tp->mss_cache = c->mds;
  tp->snd_una = tp->snd_nxt = tp->high_seq = 0xfff00000u;
  tp->cwnd_usage_seq = tp->snd_nxt;
  tp->snd_cwnd_stamp = tcp_jiffies32;
  tp->lsndtime = tcp_jiffies32;
  tp->inet_conn.icsk_rto = (u32)((uint64_t)LX_TIMEOUT_INIT_US * c->hz / 1000000u);
  tp->inet_conn.icsk_ca_state = TCP_CA_Open;
  tp->inet_conn.icsk_ca_ops = c->ops;
  sk->sk_gso_max_size = LX_GSO_MAX_SIZE;
  sk->sk_max_pacing_rate = ~0UL;
  sk->sk_pacing_status = SK_PACING_NONE; /* no fq qdisc: Debian's default is fq_codel */
  /* tcp_init_congestion_control (tcp_cong.c): ops->init, if any. */
  if (c->ops->init) c->ops->init(sk);
  return c;
}

void ccd_close(void* ctl)
{
  lx_ctl* c = (lx_ctl*)ctl;
  if (c == NULL) return;
  free(c->out);
  free(c);
}

const char* ccd_last_error(void* ctl)
{
  lx_ctl* c = (lx_ctl*)ctl;
  return c ? c->err : "linux: no controller";
}

/* ---- the send and ACK paths of tcp_output.c / tcp_input.c ------------------ */

static void set_ca_state(lx_ctl* c, u8 state)
{
  /* tcp_set_ca_state (tcp_cong.c:37-46): the callback sees the old state. */
  if (c->ops->set_state) c->ops->set_state(SK(c), state);
  c->tp.inet_conn.icsk_ca_state = state;
}

/* The sequence space.  TCP retransmits lost data under its old sequence
 * numbers, so snd_una stays at a lost segment until its retransmission is
 * acknowledged, and recovery (which ends when snd_una reaches high_seq) lasts
 * until then.  QUIC puts the data in new packets, so a packet declared lost
 * stays here as a hole (lost_us set) until the packet carrying its
 * retransmission is acknowledged (or the packet itself turns out acknowledged,
 * a spurious loss).  Which packet that is: the first one sent after the loss
 * declaration that carries no other retransmission, oldest hole first (QUIC
 * stacks send lost frames before new data; one lost datagram's frames fill
 * about one new datagram).  If that packet is lost too, the hole waits for
 * the next one, as TCP retransmits a segment again.
 * packets_out counts holes (tcp_sock.packets_out keeps lost segments);
 * packets in flight do not (tcp_packets_in_flight subtracts lost_out). */
static u32 in_flight(const lx_ctl* c) { return (u32)(c->n_out - c->n_lost); }

static void sync_una(lx_ctl* c)
{
  c->tp.snd_una = c->n_out ? c->out[0].seq : c->tp.snd_nxt;
  c->tp.packets_out = (u32)c->n_out;
}

static int listed(const ccd_packet* pkts, uint32_t n, uint64_t pn)
{
  for (uint32_t i = 0; i < n; i++)
    if (pkts[i].pn == pn) return 1;
  return 0;
}

/* Acknowledged packets leave (and holes they fill); returns how many packets
 * in flight were acknowledged, and the newest send time among them. */
static int ack_packets(lx_ctl* c, const ccd_event* ev, int64_t* newest_sent)
{
  int acked = 0;
  size_t w = 0;
  for (size_t r = 0; r < c->n_out; r++) {
    lx_pkt* p = &c->out[r];
    if (p->lost_us < 0 && listed(ev->packets, ev->n_packets, p->pn)) {
      acked++;
      if (p->sent_us > *newest_sent) *newest_sent = p->sent_us;
      continue;
    }
    if (p->lost_us >= 0 && ((p->has_rtx && listed(ev->packets, ev->n_packets, p->rtx_pn)) ||
                            listed(ev->spurious, ev->n_spurious, p->pn))) {
      c->n_lost--;
      continue;
    }
    c->out[w++] = *p;
  }
  c->n_out = w;
  sync_una(c);
  return acked;
}

static void mark_lost(lx_ctl* c, const ccd_packet* pkts, uint32_t n, int64_t now)
{
  for (size_t r = 0; r < c->n_out; r++) {
    lx_pkt* p = &c->out[r];
    if (p->lost_us < 0 && listed(pkts, n, p->pn)) {
      p->lost_us = now;
      p->has_rtx = 0;
      c->n_lost++;
    } else if (p->lost_us >= 0 && p->has_rtx && listed(pkts, n, p->rtx_pn)) {
      p->has_rtx = 0;   /* its retransmission is lost: it is retransmitted again */
    }
  }
  sync_una(c);
}

static void assign_retransmission(lx_ctl* c, uint64_t pn)
{
  for (size_t r = 0; r < c->n_out; r++)
    if (c->out[r].lost_us >= 0 && !c->out[r].has_rtx) {
      c->out[r].has_rtx = 1;
      c->out[r].rtx_pn = pn;
      return;
    }
}

/* icsk_rto in jiffies: __tcp_set_rto (include/net/tcp.h:775-778) is srtt + rttvar_us,
 * where tcp_rtt_estimator keeps rttvar_us at least tcp_rto_min (200 ms,
 * tcp_input.c:943); from the harness's RFC 9002 estimator: srtt + max(4 rttvar,
 * 200 ms), at most TCP_RTO_MAX (120 s). */
static u32 rto_jiffies(const ccd_event* ev)
{
  int64_t var = 4 * ev->rtt.rttvar_us;
  if (var < 200000) var = 200000;
  int64_t rto = ev->rtt.smoothed_us + var;
  if (rto > 120000000) rto = 120000000;
  return (u32)usecs_to_jiffies((unsigned int)rto);
}

static void slow_start_after_idle_check(lx_ctl* c, const ccd_event* ev)
{
  /* tcp_slow_start_after_idle_check (include/net/tcp.h:1506-1518), called when
   * the application queues data (tcp_skb_entail, tcp.c:690): after more than an
   * RTO with nothing outstanding, tcp_cwnd_restart (tcp_output.c:144-160). */
  struct tcp_sock* tp = &c->tp;
  if (!c->ssai || tp->packets_out) return;
  u32 rto = rto_jiffies(ev);
  s32 delta = (s32)(tcp_jiffies32 - tp->lsndtime);
  if (delta <= (s32)rto) return;
  u32 restart_cwnd = TCP_INIT_CWND;   /* tcp_init_cwnd without a route metric */
  u32 cwnd = tcp_snd_cwnd(tp);
  if (c->ops->cwnd_event) c->ops->cwnd_event(SK(c), CA_EVENT_CWND_RESTART);
  tp->snd_ssthresh = tcp_current_ssthresh(SK(c));
  restart_cwnd = min(restart_cwnd, cwnd);
  while ((delta -= (s32)rto) > 0 && cwnd > restart_cwnd) cwnd >>= 1;
  tcp_snd_cwnd_set(tp, max(cwnd, restart_cwnd));
  tp->snd_cwnd_stamp = tcp_jiffies32;
  tp->snd_cwnd_used = 0;
}

static void cwnd_validate(lx_ctl* c, bool is_cwnd_limited, const ccd_event* ev)
{
  /* tcp_cwnd_validate (tcp_output.c:1920-1945). */
  struct tcp_sock* tp = &c->tp;
  if (!before(tp->snd_una, tp->cwnd_usage_seq) || is_cwnd_limited ||
      (!tp->is_cwnd_limited && tp->packets_out > tp->max_packets_out)) {
    tp->is_cwnd_limited = is_cwnd_limited;
    tp->max_packets_out = tp->packets_out;
    tp->cwnd_usage_seq = tp->snd_nxt;
  }
  if (tcp_is_cwnd_limited(SK(c))) {
    tp->snd_cwnd_used = 0;
    tp->snd_cwnd_stamp = tcp_jiffies32;
  } else {
    if (tp->packets_out > tp->snd_cwnd_used) tp->snd_cwnd_used = tp->packets_out;
    /* With slow_start_after_idle, a window unused for an RTO shrinks halfway to
     * what was used: tcp_cwnd_application_limited (tcp_output.c:1902-1918, RFC 2861;
     * the sender is app-limited, not send-buffer-limited). */
    if (c->ssai && (s32)(tcp_jiffies32 - tp->snd_cwnd_stamp) >= (s32)rto_jiffies(ev)) {
      if (tp->inet_conn.icsk_ca_state == TCP_CA_Open) {
        u32 win_used = max(tp->snd_cwnd_used, (u32)TCP_INIT_CWND);
        if (win_used < tcp_snd_cwnd(tp)) {
          tp->snd_ssthresh = tcp_current_ssthresh(SK(c));
          tcp_snd_cwnd_set(tp, (tcp_snd_cwnd(tp) + win_used) >> 1);
        }
        tp->snd_cwnd_used = 0;
      }
      tp->snd_cwnd_stamp = tcp_jiffies32;
    }
  }
}

static int on_sent(lx_ctl* c, const ccd_event* ev)
{
  if (ev->n_packets != 1) {
    snprintf(c->err, sizeof(c->err), "linux: a send event carries %u packets, expected 1", ev->n_packets);
    return -1;
  }
  const ccd_packet* p = &ev->packets[0];
  struct tcp_sock* tp = &c->tp;
  /* The data was queued before it is sent (tcp_skb_entail's check). */
  slow_start_after_idle_check(c, ev);
  /* tcp_event_data_sent (tcp_output.c:163-172): the origin of the idle
   * rule every QUIC CUBIC ported -- on the first send with nothing in flight,
   * cubictcp_cwnd_event shifts epoch_start by now - lsndtime, clamped to now
   * (c2e7204d180f, "tcp_cubic: do not set epoch_start in the future"). */
  if (in_flight(c) == 0 && c->ops->cwnd_event) c->ops->cwnd_event(SK(c), CA_EVENT_TX_START);
  tp->lsndtime = tcp_jiffies32;
  if (c->n_out == c->cap_out) {
    size_t cap = c->cap_out ? 2 * c->cap_out : 64;
    lx_pkt* grown = (lx_pkt*)realloc(c->out, cap * sizeof(lx_pkt));
    if (grown == NULL) {
      snprintf(c->err, sizeof(c->err), "linux: out of memory");
      return -1;
    }
    c->out = grown;
    c->cap_out = cap;
  }
  assign_retransmission(c, p->pn);
  c->out[c->n_out++] = (lx_pkt){ p->pn, tp->snd_nxt, p->sent_us, p->bytes, -1, 0, 0 };
  tp->snd_nxt += p->bytes;   /* tcp_event_new_data_sent */
  sync_una(c);
  /* tcp_write_xmit (tcp_output.c:2867): cwnd-limited when the loop stopped on
   * the window; the trace says so with its app_limited flag. */
  bool limited = !(ev->flags & CCD_FLAG_APP_LIMITED) || in_flight(c) >= tcp_snd_cwnd(tp);
  cwnd_validate(c, limited, ev);
  return 0;
}

static void init_cwnd_reduction(lx_ctl* c)
{
  /* tcp_init_cwnd_reduction (tcp_input.c:2709-2720). */
  struct tcp_sock* tp = &c->tp;
  tp->high_seq = tp->snd_nxt;
  tp->snd_cwnd_cnt = 0;
  tp->prior_cwnd = tcp_snd_cwnd(tp);
  tp->snd_ssthresh = c->ops->ssthresh(SK(c));
  /* PRR would walk cwnd down to ssthresh over the recovery (tcp_cwnd_reduction,
   * tcp_input.c:2724-2747) and tcp_end_cwnd_reduction sets it there at the
   * end; RFC 9002 reduces at once, and so does this shim. */
  tcp_snd_cwnd_set(tp, max(tp->snd_ssthresh, 1u));
}

static int on_lost(lx_ctl* c, const ccd_event* ev)
{
  mark_lost(c, ev->packets, ev->n_packets, ev->now_us);
  /* tcp_enter_recovery (tcp_input.c:2916-2940), from Open, Disorder or CWR:
   * no second ssthresh if CWR already reduced in this window. */
  if (c->tp.inet_conn.icsk_ca_state < TCP_CA_Recovery) {
    if (!tcp_in_cwnd_reduction(SK(c))) init_cwnd_reduction(c);
    set_ca_state(c, TCP_CA_Recovery);
    c->recovery_start = ev->now_us;
  }
  return 0;
}

static int on_persistent_congestion(lx_ctl* c, const ccd_event* ev)
{
  struct tcp_sock* tp = &c->tp;
  u8 state = tp->inet_conn.icsk_ca_state;
  /* tcp_enter_loss (tcp_input.c:2196-2232).  "Reduce ssthresh if it has not
   * yet been made inside this window": a recovery the CCD_LOST before this
   * event opened has already reduced.  A second timeout while still in Loss
   * is a backed-off retransmission (icsk_retransmits > 0): no reduction. */
  if (state <= TCP_CA_Disorder || !after(tp->high_seq, tp->snd_una)) {
    tp->prior_cwnd = tcp_snd_cwnd(tp);
    tp->snd_ssthresh = c->ops->ssthresh(SK(c));
    if (c->ops->cwnd_event) c->ops->cwnd_event(SK(c), CA_EVENT_LOSS);
  }
  /* tcp_packets_in_flight() + 1, after tcp_timeout_mark_lost (tcp_input.c:2165-2194)
   * marked every unacknowledged segment lost: 1. */
  for (size_t r = 0; r < c->n_out; r++)
    if (c->out[r].lost_us < 0) {
      c->out[r].lost_us = ev->now_us;
      c->out[r].has_rtx = 0;
      c->n_lost++;
    } else {
      c->out[r].has_rtx = 0;   /* tcp_timeout_mark_lost: retransmit every hole again */
    }
  tcp_snd_cwnd_set(tp, in_flight(c) + 1);
  tp->snd_cwnd_cnt = 0;
  tp->snd_cwnd_stamp = tcp_jiffies32;
  set_ca_state(c, TCP_CA_Loss);
  tp->high_seq = tp->snd_nxt;
  c->recovery_start = CCD_NO_TIME;
  return 0;
}

static void update_pacing_rate(lx_ctl* c, const ccd_event* ev)
{
  /* tcp_update_pacing_rate (tcp_input.c:952-983); srtt_us is RTT << 3. */
  struct tcp_sock* tp = &c->tp;
  struct sock* sk = SK(c);
  tp->srtt_us = ev->rtt.smoothed_us > 0 ? (u32)(ev->rtt.smoothed_us << 3) : 0;
  u64 rate = (u64)tp->mss_cache * ((USEC_PER_SEC / 100) << 3);
  if (tcp_snd_cwnd(tp) < tp->snd_ssthresh / 2)
    rate *= LX_PACING_SS_RATIO;
  else
    rate *= LX_PACING_CA_RATIO;
  rate *= max(tcp_snd_cwnd(tp), tp->packets_out);
  if (tp->srtt_us) do_div(rate, tp->srtt_us);
  sk->sk_pacing_rate = min_t(u64, rate, sk->sk_max_pacing_rate);
}

static void enter_cwr(lx_ctl* c, int64_t now)
{
  /* tcp_enter_cwr (tcp_input.c:2766-2776). */
  if (c->tp.inet_conn.icsk_ca_state < TCP_CA_CWR) {
    init_cwnd_reduction(c);
    set_ca_state(c, TCP_CA_CWR);
    c->recovery_start = now;
  }
}

static int on_acked(lx_ctl* c, const ccd_event* ev)
{
  struct tcp_sock* tp = &c->tp;
  struct sock* sk = SK(c);
  int64_t newest_sent = INT64_MIN;
  /* tcp_ack: snd_una moves (tcp_snd_una_update) before tcp_clean_rtx_queue. */
  u32 acked = (u32)ack_packets(c, ev, &newest_sent);
  /* tcp_clean_rtx_queue (tcp_input.c:3472, 3530-3537): the CA RTT sample is
   * from the most recently sent packet this ACK newly acknowledges. */
  struct ack_sample sample = { .pkts_acked = acked, .rtt_us = -1, .in_flight = 0 };
  if (acked > 0) {
    int64_t rtt = ev->now_us - newest_sent;
    sample.rtt_us = rtt > INT32_MAX ? INT32_MAX : (s32)(rtt < 0 ? 0 : rtt);
    sample.in_flight = tp->mss_cache * acked;
  }
  if (c->ops->pkts_acked) c->ops->pkts_acked(sk, &sample);

  /* tcp_fastretrans_alert (tcp_input.c:3079-3130), "D. Check state exit
   * conditions. State can be terminated when high_seq is ACKed." */
  u8 state = tp->inet_conn.icsk_ca_state;
  if (state != TCP_CA_Open && !before(tp->snd_una, tp->high_seq)) {
    if (state == TCP_CA_CWR) {
      if (tp->snd_una != tp->high_seq) {   /* "held something *above* high_seq" */
        tcp_snd_cwnd_set(tp, tp->snd_ssthresh);   /* tcp_end_cwnd_reduction */
        set_ca_state(c, TCP_CA_Open);
      }
    } else if (state == TCP_CA_Recovery) {
      set_ca_state(c, TCP_CA_Open);        /* tcp_try_undo_recovery, no undo */
      if (tp->snd_ssthresh < TCP_INFINITE_SSTHRESH)
        tcp_snd_cwnd_set(tp, tp->snd_ssthresh);   /* tcp_end_cwnd_reduction */
    } else if (state == TCP_CA_Loss) {
      set_ca_state(c, TCP_CA_Open);        /* tcp_process_loss -> tcp_try_undo_recovery */
    }
  }
  /* tcp_try_to_open (tcp_input.c:2802-2803): an ECE enters CWR. */
  if ((ev->flags & CCD_FLAG_ECN_CE) && tp->inet_conn.icsk_ca_state == TCP_CA_Open)
    enter_cwr(c, ev->now_us);

  /* tcp_cong_control (tcp_input.c:3616-3634): no growth while the window is
   * being reduced; otherwise cong_avoid with the packets newly delivered
   * (tcp_may_raise_cwnd: FLAG_DATA_ACKED, here: something new acknowledged). */
  if (!tcp_in_cwnd_reduction(sk) && acked > 0)
    c->ops->cong_avoid(sk, tp->snd_una, acked);
  update_pacing_rate(c, ev);
  return 0;
}

static void fill_snapshot(lx_ctl* c, ccd_snapshot* out)
{
  struct tcp_sock* tp = &c->tp;
  memset(out, 0, sizeof(*out));
  out->cwnd = (uint64_t)tcp_snd_cwnd(tp) * c->mds;
  out->ssthresh = tp->snd_ssthresh >= TCP_INFINITE_SSTHRESH ? CCD_NONE
                                                             : (uint64_t)tp->snd_ssthresh * c->mds;
  uint64_t inflight = 0;
  for (size_t i = 0; i < c->n_out; i++)
    if (c->out[i].lost_us < 0) inflight += c->out[i].bytes;
  out->bytes_in_flight = inflight;
  u8 state = tp->inet_conn.icsk_ca_state;
  if (state == TCP_CA_Recovery || state == TCP_CA_CWR)
    out->phase = CCD_PHASE_RECOVERY;
  else if (!tcp_is_cwnd_limited((struct sock*)tp))
    out->phase = CCD_PHASE_APP_LIMITED;
  else
    out->phase = tcp_in_slow_start(tp) ? CCD_PHASE_SLOW_START : CCD_PHASE_CONGESTION_AVOIDANCE;
  out->recovery_start_us = c->recovery_start;
  out->epoch_start_us = CCD_NO_TIME;
  out->w_max_bytes = NAN;
  out->k_us = NAN;
  if (c->is_cubic) {
    const struct bictcp* ca = inet_csk_ca((struct sock*)tp);
    if (ca->epoch_start) {
      out->epoch_start_us = jiffies_to_trace_us(c, ca->epoch_start);
      /* bic_K is in 1/1024 s (BICTCP_HZ), the origin in segments. */
      out->k_us = (double)ca->bic_K * 1e6 / (double)(1u << BICTCP_HZ);
    }
    if (ca->last_max_cwnd) out->w_max_bytes = (double)ca->last_max_cwnd * c->mds;
  }
}

int ccd_step(void* ctl, const ccd_event* ev, ccd_snapshot* out)
{
  lx_ctl* c = (lx_ctl*)ctl;
  if (c == NULL || ev == NULL || out == NULL) return -1;
  c->err[0] = 0;
  lx_enter(c, ev->now_us);
  int rc = 0;
  switch (ev->kind) {
  case CCD_SENT: rc = on_sent(c, ev); break;
  case CCD_ACKED: rc = on_acked(c, ev); break;
  case CCD_LOST: rc = on_lost(c, ev); break;
  case CCD_PERSISTENT_CONGESTION: rc = on_persistent_congestion(c, ev); break;
  case CCD_APP_IDLE: break;
  case CCD_APP_DATA: slow_start_after_idle_check(c, ev); break;  /* tcp_skb_entail */
  default:
    snprintf(c->err, sizeof(c->err), "linux: unknown event kind %u", ev->kind);
    return -1;
  }
  if (rc != 0) return rc;
  fill_snapshot(c, out);
  return 0;
}
