/*
 * ccdiff's user-space stand-in for the few kernel headers that
 * net/ipv4/tcp_cubic.c and the part of net/ipv4/tcp_cong.c it calls
 * (tcp_slow_start, tcp_cong_avoid_ai, the Reno ops) include.  Nothing here
 * changes what those files compute: it supplies the types, the socket fields
 * they read (struct sock / inet_connection_sock / tcp_sock, cut down to those
 * fields), the clocks (jiffies, tcp_mstamp) and no-op module / BTF / SNMP
 * macros.  The inline helpers of include/net/tcp.h the controllers call
 * (tcp_snd_cwnd, tcp_in_slow_start, tcp_is_cwnd_limited, tcp_current_ssthresh, ...) are NOT written
 * here: build.sh copies them verbatim from the fetched tree's tcp.h into
 * gen/tcp_h_part.h, which net/tcp.h includes at its end.
 *
 * Each definition cites the kernel header it stands in for (6.12.117).
 */
#ifndef CCDIFF_LINUX_KSHIM_H
#define CCDIFF_LINUX_KSHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;
typedef uint32_t __u32;

/* include/linux/compiler_types.h, init.h, module.h, moduleparam.h: no-ops. */
#define __read_mostly
#define __init
#define __exit
#define __bpf_kfunc
#define THIS_MODULE NULL
#define module_param(name, type, perm)
#define MODULE_PARM_DESC(name, desc)
#define module_init(fn)
#define module_exit(fn)
#define MODULE_AUTHOR(x)
#define MODULE_LICENSE(x)
#define MODULE_DESCRIPTION(x)
#define MODULE_VERSION(x)
#define EXPORT_SYMBOL_GPL(sym) extern int ccdl_export_unused_
#define EXPORT_SYMBOL(sym) extern int ccdl_export_unused_
#define BUILD_BUG_ON(cond) _Static_assert(!(cond), #cond)
#define WARN_ON_ONCE(cond) ((void)(cond))
#define READ_ONCE(x) (x)
#define WRITE_ONCE(x, v) ((x) = (v))
#define pr_debug(...) ((void)0)
#define likely(x) (x)
#define unlikely(x) (x)

/* include/linux/btf_ids.h, btf.h: the kfunc set is registered with BPF only. */
struct btf_id_set8 { u32 cnt; };
struct btf_kfunc_id_set { void *owner; struct btf_id_set8 *set; };
#define BTF_SET8_START(name) static struct btf_id_set8 name = { 0 };
#define BTF_SET8_END(name)
#define BTF_KFUNCS_START(name) static struct btf_id_set8 name = { 0 };
#define BTF_KFUNCS_END(name)
#define BTF_ID_FLAGS(...)
#define BPF_PROG_TYPE_STRUCT_OPS 0
static inline int register_btf_kfunc_id_set(int type, const struct btf_kfunc_id_set *s)
{ (void)type; (void)s; return 0; }

/* include/linux/minmax.h (type-checking dropped; operands here are u32/u64). */
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define min_t(type, a, b) ((type)(a) < (type)(b) ? (type)(a) : (type)(b))
#define max_t(type, a, b) ((type)(a) > (type)(b) ? (type)(a) : (type)(b))
#define clamp(val, lo, hi) min((typeof(val))max(val, lo), hi)

/* include/linux/bitops.h fls64: 1-based index of the highest set bit, 0 for 0. */
static inline int fls64(u64 x) { return x ? 64 - __builtin_clzll(x) : 0; }
/* include/linux/math64.h, asm-generic/div64.h. */
static inline u64 div64_u64(u64 a, u64 b) { return a / b; }
static inline u64 div_u64(u64 a, u32 b) { return a / b; }
#define div64_ul(a, b) ((u64)(a) / (unsigned long)(b))
#define do_div(n, base) ({ u32 __rem = (u32)((n) % (base)); (n) = (n) / (base); __rem; })

/* include/linux/time64.h */
#define USEC_PER_MSEC 1000L
#define USEC_PER_SEC 1000000L

/* HZ and jiffies (include/asm-generic/param.h, linux/jiffies.h).  HZ is a
 * kernel build constant (Debian's amd64 and arm64 configs: CONFIG_HZ_250=y);
 * here it is a variable the adapter sets from its hz= option before every
 * call, as it sets jiffies from the event's time. */
extern unsigned long ccdl_hz;
extern unsigned long jiffies;
#define HZ ccdl_hz
/* linux/jiffies.h _usecs_to_jiffies for HZ dividing USEC_PER_SEC: round up. */
static inline unsigned long usecs_to_jiffies(unsigned int u)
{ return (u + (USEC_PER_SEC / HZ) - 1) / (USEC_PER_SEC / HZ); }

/* include/linux/tcp.h / net/tcp.h sequence-space comparisons. */
static inline bool before(u32 seq1, u32 seq2) { return (s32)(seq1 - seq2) < 0; }
#define after(seq2, seq1) before(seq1, seq2)

/* include/uapi/linux/tcp.h enum tcp_ca_state. */
enum tcp_ca_state {
  TCP_CA_Open = 0,
  TCP_CA_Disorder = 1,
  TCP_CA_CWR = 2,
  TCP_CA_Recovery = 3,
  TCP_CA_Loss = 4
};
#define TCPF_CA_Open (1 << TCP_CA_Open)
#define TCPF_CA_Disorder (1 << TCP_CA_Disorder)
#define TCPF_CA_CWR (1 << TCP_CA_CWR)
#define TCPF_CA_Recovery (1 << TCP_CA_Recovery)
#define TCPF_CA_Loss (1 << TCP_CA_Loss)

/* include/net/sock.h enum sk_pacing. */
enum sk_pacing { SK_PACING_NONE = 0, SK_PACING_NEEDED = 1, SK_PACING_FQ = 2 };

/* The fields the controllers and the adapter's caller code read; the kernel's
 * structs nest the same way (tcp_sock starts with inet_connection_sock, which
 * starts with the sock), so tcp_sk() / inet_csk() are casts as in the kernel. */
struct sock {
  unsigned long sk_pacing_rate;    /* bytes/s, tcp_update_pacing_rate */
  unsigned long sk_max_pacing_rate;
  u32 sk_pacing_status;            /* enum sk_pacing */
  unsigned int sk_gso_max_size;
};
struct tcp_congestion_ops;
#define ICSK_CA_PRIV_SIZE (13 * sizeof(u64)) /* include/net/inet_connection_sock.h */
struct inet_connection_sock {
  struct sock icsk_inet;
  const struct tcp_congestion_ops *icsk_ca_ops;
  u8 icsk_ca_state;
  u32 icsk_rto;                    /* jiffies */
  u64 icsk_ca_priv[ICSK_CA_PRIV_SIZE / sizeof(u64)];
};
struct tcp_sock {
  struct inet_connection_sock inet_conn;
  u32 snd_una, snd_nxt, high_seq;  /* sequence space, bytes */
  u32 snd_cwnd, snd_ssthresh, snd_cwnd_cnt, snd_cwnd_clamp, snd_cwnd_used, snd_cwnd_stamp;
  u32 prior_cwnd, prior_ssthresh;
  u32 packets_out, max_packets_out, cwnd_usage_seq;
  u8 is_cwnd_limited;
  u32 lsndtime;                    /* jiffies of the last send */
  u32 srtt_us;                     /* smoothed RTT << 3 */
  u32 mss_cache;
  u64 tcp_mstamp;                  /* µs clock of the event being processed */
};
#define tcp_sk(sk) ((struct tcp_sock *)(sk))
#define inet_csk(sk) ((struct inet_connection_sock *)(sk))
static inline void *inet_csk_ca(const struct sock *sk) { return (void *)inet_csk(sk)->icsk_ca_priv; }

/* include/net/tcp.h */
#define TCP_INFINITE_SSTHRESH 0x7fffffff
#define TCP_INIT_CWND 10
#define TCP_CONG_NON_RESTRICTED 0x1
enum tcp_ca_event {
  CA_EVENT_TX_START,
  CA_EVENT_CWND_RESTART,
  CA_EVENT_COMPLETE_CWR,
  CA_EVENT_LOSS,
  CA_EVENT_ECN_NO_CE,
  CA_EVENT_ECN_IS_CE
};
struct ack_sample {
  u32 pkts_acked;
  s32 rtt_us;
  u32 in_flight;
};
struct rate_sample;
/* The callbacks tcp_cubic.c and tcp_cong.c's Reno fill in (include/net/tcp.h
 * struct tcp_congestion_ops; the ones neither sets are left out). */
struct tcp_congestion_ops {
  u32 (*ssthresh)(struct sock *sk);
  void (*cong_avoid)(struct sock *sk, u32 ack, u32 acked);
  void (*set_state)(struct sock *sk, u8 new_state);
  void (*cwnd_event)(struct sock *sk, enum tcp_ca_event ev);
  void (*pkts_acked)(struct sock *sk, const struct ack_sample *sample);
  u32 (*undo_cwnd)(struct sock *sk);
  void (*init)(struct sock *sk);
  void (*cong_control)(struct sock *sk, const struct rate_sample *rs);
  u32 flags;
  char name[16];
  void *owner;
};
static inline int tcp_register_congestion_control(struct tcp_congestion_ops *ca) { (void)ca; return 0; }
static inline void tcp_unregister_congestion_control(struct tcp_congestion_ops *ca) { (void)ca; }

/* SNMP counters (include/net/ip.h NET_INC_STATS): not kept. */
#define sock_net(sk) ((void *)(sk))
#define NET_INC_STATS(net, field) ((void)(net))
#define NET_ADD_STATS(net, field, v) ((void)(net), (void)(v))

#define tcp_jiffies32 ((u32)jiffies)

/* net/ipv4/tcp_cong.c, extracted by build.sh into gen/tcp_cong_part.c. */
u32 tcp_slow_start(struct tcp_sock *tp, u32 acked);
void tcp_cong_avoid_ai(struct tcp_sock *tp, u32 w, u32 acked);
void tcp_reno_cong_avoid(struct sock *sk, u32 ack, u32 acked);
u32 tcp_reno_ssthresh(struct sock *sk);
u32 tcp_reno_undo_cwnd(struct sock *sk);

#endif
