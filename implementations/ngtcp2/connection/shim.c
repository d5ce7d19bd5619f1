/*
 * ccdiff connection shim for ngtcp2: ngtcp2's own client and server, one
 * ngtcp2_conn each (ngtcp2_conn_client_new / ngtcp2_conn_server_new), behind
 * implementations/include/ccdiff_connection.h (ABI 1; docs/connection-mode.md).
 *
 * Driven as ngtcp2's own examples drive a connection (examples/client.cc,
 * server.cc): datagrams in through ngtcp2_conn_read_pkt, datagrams out through
 * ngtcp2_conn_writev_stream (one per ccd_conn_send, no GSO), timers through
 * ngtcp2_conn_get_expiry / ngtcp2_conn_handle_expiry, and the pacer through
 * ngtcp2_conn_update_pkt_tx_time after each burst of at most
 * max(send_quantum / mds, 1) datagrams (the examples' loop, without their
 * 64-datagram GSO cap, which send_quantum never reaches here).  ngtcp2 paces by
 * refusing to write before its next transmission time (conn_pacing_pkt_tx_allowed)
 * and that time is part of its expiry: a datagram this shim returns is due now.
 * Everything between the datagrams is ngtcp2's: packet protection through
 * ngtcp2's crypto helper (crypto/shared.c) on GnuTLS (gnutls_crypto.c: ccdiff's
 * backend, as the pinned crate does not vendor ngtcp2's crypto/gnutls/), its
 * loss detection and PTO (ngtcp2_rtb.c, ngtcp2_conn.c), its ACK policy
 * (ack_thresh 2 and max_ack_delay 25 ms, its defaults), its pacer, and its CUBIC
 * or Reno (ngtcp2_cc.c) with its rate sampler.  Nothing of ngtcp2 is modified.
 *
 * Time.  Every ngtcp2 call takes ngtcp2_tstamp ts in nanoseconds: ts =
 * (CCD_CONN_CLOCK_BASE_US + now_us) * 1000.  ngtcp2's lib/ never reads a clock
 * (grep for clock_gettime/gettimeofday/time( in lib/ and crypto/shared.c: none),
 * and the shim is linked with --wrap for gettimeofday, clock_gettime and time, so
 * a read by anything linked statically (ngtcp2, the shim) is counted and fails
 * the call.  GnuTLS is a shared library and reads the wall clock itself (the
 * session's timestamp, gnutls_time); with no session tickets (GNUTLS_NO_TICKETS)
 * and no certificate verification that time changes no message: the handshake's
 * messages are the same size and ngtcp2 gets no time from it.  Expiries are
 * rounded up to the next microsecond, so the harness's timer call is never early.
 *
 * Randomness.  ngtcp2's rand callback (its PCG seed, the fixed-bit grease, packet
 * number skips), the client's initial connection IDs, every new connection ID and
 * stateless-reset token come from one splitmix64 stream per endpoint seeded from
 * the run's seed and the role: deterministic.  GnuTLS draws the TLS randoms and
 * key shares itself (X25519; fixed sizes), and the server's Ed25519 signature is
 * 64 bytes: they change the datagrams' bytes, not their sizes or times.
 *
 * Configuration.  settings: max_tx_udp_payload_size = mds, no_pmtud = 1 and
 * no_tx_udp_payload_size_shaping = 1 (without it ngtcp2 holds packets at 1,200
 * bytes until PMTUD raises the path's limit: ngtcp2_conn.c conn_shape_udp_payload),
 * cc_algo CUBIC or RENO (cc=cubic|reno), handshake_timeout none, initial_rtt
 * ngtcp2's default (333 ms).  Transport parameters: initial_max_data and every
 * initial_max_stream_data 4 GiB, max_idle_timeout 0 (none), 100 bidirectional
 * streams, max_udp_payload_size mds.  The server also extends both flow-control
 * windows by every byte it reads (extend_max_stream_offset, extend_max_offset).
 * TLS: TLS 1.3 only, AES-128-GCM, ALPN "ccdiff", no tickets; the server loads
 * cert/key (the committed Ed25519 test certificate; GnuTLS 3.7 signs with
 * Ed25519 in TLS 1.3); the client does not verify the certificate (no trust
 * store, no verify function) but GnuTLS checks the CertificateVerify signature
 * with the certificate's key.
 *
 * State read (ccd_conn_stats): ngtcp2_conn_get_conn_info (cwnd, ssthresh,
 * bytes_in_flight, RTTs, packets sent and lost, bytes sent); the RTTs are unknown
 * until ngtcp2 has a sample (cstat.first_rtt_sample_ts, ngtcp2_conn.h's private
 * state), ssthresh while it is UINT64_MAX.  in_recovery is ngtcp2's own rule
 * (ngtcp2_cc.c:113-117, in_congestion_recovery): an ACK is in recovery when its
 * largest acknowledged packet was sent at or before
 * cstat.congestion_recovery_start_ts; the shim wraps the controller's
 * on_ack_recv (CUBIC: ack->largest_pkt_sent_ts) or on_pkt_acked (Reno, which
 * judges each packet: the latest acknowledged send time) to remember what the
 * last ACK carried, and reports 1 while a recovery start is set and that send time
 * is not after it.  congestion_events counts the controller's congestion_event
 * calls that moved the recovery start (a new recovery period).
 *
 * qlog=PATH: ngtcp2's own qlog writer (lib/ngtcp2_qlog.c, JSON-SEQ, qlog 0.3 names:
 * transport:packet_sent / packet_received with their frames, ACK frames with
 * acked_ranges and ack_delay, recovery:packet_lost, recovery:metrics_updated with
 * congestion_window, bytes_in_flight and ssthresh) through settings.qlog_write,
 * written to PATH as ngtcp2 hands it over, record by record.  Three additions, all
 * the shim's, each said in the file:
 *   - time.  ngtcp2 writes each event's time as the call's ts minus
 *     settings.initial_ts, truncated to whole milliseconds (ngtcp2_qlog.c
 *     write_tstamp: ts / NGTCP2_MILLISECONDS; qlog_write_time).  ts is the one this
 *     shim passed (every call that logs sets conn->qlog.last_ts to it first:
 *     conn_update_timestamp, ngtcp2_conn.c:87-93), so the shim writes the
 *     microseconds ngtcp2 cut off as the time's fraction ("time":7003.412 where
 *     ngtcp2 wrote 7003), after checking that ngtcp2's whole milliseconds are the
 *     call's; every other byte is ngtcp2's.  Without it every packet of one
 *     millisecond has one time, and the RTT samples the import takes from send and
 *     receive times are whole milliseconds (a 10 ms path's RTT is 10 or 11).
 *     Durations (ack_delay, the RTTs in metrics_updated) stay ngtcp2's whole
 *     milliseconds: the shim does not see them.
 *   - the client's application-limited periods, as ngtcp2's rate sampler has them:
 *     a write call that finds nothing to send while the window has room and the
 *     pacer allows sets rst.app_limited (conn_write_vmsg_wrapper, ngtcp2_conn.c:
 *     12123-12129), and the packets sent until that much is delivered are
 *     app-limited (ngtcp2_rst.c:55-67), which freezes CUBIC's growth and moves its
 *     t (ngtcp2_cc.c:317-318, 402-420).  ngtcp2 1.25.0 logs no
 *     congestion_state_updated, so the shim writes one, "written_by": "ccdiff
 *     connection shim", when a write call set rst.app_limited (new
 *     "application_limited": the trace's app_idle, which the ngtcp2 adapter turns
 *     into the same assignment) and when the client next has stream data to write
 *     (new: the controller's state, slow_start / congestion_avoidance / recovery:
 *     app_data).
 *   - one recovery:parameters_set at the start, "written_by": "ccdiff connection
 *     shim", with max_datagram_size (= mds) and initial_rtt (ngtcp2's
 *     settings.initial_rtt, 333 ms): ngtcp2 logs neither (its transport
 *     parameters give max_udp_payload_size, a limit, not the datagram size its
 *     recovery counts with), and ccdiff import needs both (as the aioquic shim).
 * ngtcp2 1.25.0 logs no persistent congestion record and no key discard (RFC 9002
 * §6.4: the Handshake packet in flight when the handshake ends stays in flight in
 * an imported trace, docs/connection-mode.md).
 *
 * CCDIFF_NGTCP2_DEBUG=1: ngtcp2's own log (settings.log_printf) to stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <gnutls/gnutls.h>

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "private.h" /* ngtcp2's private state: cstat, the controller (private.c) */
#include "gnutls_crypto.h"
#include "ccdiff_connection.h"
#include "ccdiff_connection_c.h" /* the real-clock wrappers, splitmix64, the options */

#define SHIM_EXPORT __attribute__((visibility("default")))
#define ALPN "ccdiff"
#define SNI "ccdiff.test"
#define OPTIONS "mds, cert, key, cc=cubic|reno, qlog=PATH"
#define FLOW_CONTROL (1ull << 32)
#define MIN_MDS 1200 /* RFC 9000 §14 */
#define MAX_MDS 65527
#define CID_LEN 8
#define ZEROS (64 * 1024)
/* TLS 1.3 only (QUIC), one AEAD so that every run negotiates the same suite,
 * no middlebox-compatibility mode (RFC 9001 §8.4). */
#define PRIORITY                                                                                             \
  "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:-GROUP-ALL:+GROUP-X25519:%DISABLE_TLS13_COMPAT_MODE"

static const uint8_t zeros[ZEROS]; /* the client's application bytes: ngtcp2 keeps pointers into them until acked */

/* ------------------------------------------------------------ the endpoint */

typedef struct {
  int is_server;
  int reno;
  size_t mds;
  uint64_t rng;
  ngtcp2_tstamp ts;
  ngtcp2_conn *conn;
  gnutls_session_t session;
  gnutls_certificate_credentials_t cred;
  ccd_gnutls_ref ref;
  struct sockaddr_in self_addr;
  struct sockaddr_in peer_addr;
  ngtcp2_path path;
  /* the client's application */
  int64_t stream_id;
  int stream_open;
  uint64_t offered;
  uint64_t written;
  int fin_wanted;
  int fin_written;
  /* the server's application */
  uint64_t bytes_read;
  int fin_read;
  /* sending */
  size_t burst;
  uint64_t bytes_sent;
  /* the controller, watched */
  int wrapped;
  ngtcp2_cc_on_ack_recv orig_on_ack_recv;
  ngtcp2_cc_on_pkt_acked orig_on_pkt_acked;
  ngtcp2_cc_congestion_event orig_congestion_event;
  ngtcp2_tstamp last_acked_sent_ts;
  uint64_t congestion_events;
  int established;
  int closed;
  int debug;
  /* the qlog (qlog=PATH) */
  FILE *qlog;
  ngtcp2_tstamp qlog_t0;       /* settings.initial_ts: ngtcp2's qlog times count from it */
  uint64_t qlog_mismatches;    /* records whose time was not the call's (left as ngtcp2 wrote them) */
  int qlog_write_failed;
  int qlog_app_limited;        /* an application_limited state was logged, no stream data to write since */
  uint64_t clock_reads_at_entry;
  char err[512];
} shim_t;

static void set_err(shim_t *s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof(s->err), fmt, ap);
  va_end(ap);
  for (char *p = s->err; *p; p++) {
    if (*p == '\n' || *p == '\r') *p = ' ';
  }
}

static void fill(shim_t *s, uint8_t *dest, size_t len)
{
  while (len > 0) {
    uint64_t r = splitmix64(&s->rng);
    size_t n = len < sizeof(r) ? len : sizeof(r);
    memcpy(dest, &r, n);
    dest += n;
    len -= n;
  }
}

static ngtcp2_tstamp stamp(uint64_t now_us)
{
  return ((ngtcp2_tstamp)CCD_CONN_CLOCK_BASE_US + now_us) * 1000ull;
}

static void enter(shim_t *s, uint64_t now_us)
{
  s->ts = stamp(now_us);
  s->err[0] = 0;
  s->clock_reads_at_entry = real_clock_reads;
}

static int leave(shim_t *s, const char *what)
{
  if (s->conn != NULL) {
    if (ngtcp2_conn_get_handshake_completed2(s->conn)) s->established = 1;
    if (ngtcp2_conn_in_closing_period2(s->conn) || ngtcp2_conn_in_draining_period2(s->conn)) s->closed = 1;
  }
  if (real_clock_reads != s->clock_reads_at_entry) {
    set_err(s, "ngtcp2 read the real clock %llu time(s) during %s: virtual time is broken",
            (unsigned long long)(real_clock_reads - s->clock_reads_at_entry), what);
    return -1;
  }
  if (s->qlog_write_failed) {
    set_err(s, "qlog: writing the file failed during %s: %s", what, strerror(s->qlog_write_failed));
    return -1;
  }
  if (s->qlog_mismatches) {
    set_err(s, "qlog: %llu record(s) during %s carry a time that is not the call's (ngtcp2_qlog.c qlog_write_time)",
            (unsigned long long)s->qlog_mismatches, what);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ the controller, watched */

static shim_t *shim_of_cc(ngtcp2_cc *cc)
{
  return (shim_t *)ccd_ng_user_data(ccd_ng_conn_of_cc(cc));
}

static void watch_on_ack_recv(ngtcp2_cc *cc, ngtcp2_conn_stat *cstat, const ngtcp2_cc_ack *ack, ngtcp2_tstamp ts)
{
  shim_t *s = shim_of_cc(cc);
  /* ngtcp2_cc_cubic_cc_on_ack_recv's own test: in_congestion_recovery(cstat,
   * ack->largest_pkt_sent_ts) (ngtcp2_cc.c:320-323). */
  if (ack->largest_pkt_sent_ts != UINT64_MAX) s->last_acked_sent_ts = ack->largest_pkt_sent_ts;
  s->orig_on_ack_recv(cc, cstat, ack, ts);
}

static void watch_on_pkt_acked(ngtcp2_cc *cc, ngtcp2_conn_stat *cstat, const ngtcp2_cc_pkt *pkt, ngtcp2_tstamp ts)
{
  shim_t *s = shim_of_cc(cc);
  /* Reno judges each acknowledged packet (ngtcp2_cc.c:126). */
  if (pkt->sent_ts > s->last_acked_sent_ts || s->last_acked_sent_ts == UINT64_MAX) {
    s->last_acked_sent_ts = pkt->sent_ts;
  }
  s->orig_on_pkt_acked(cc, cstat, pkt, ts);
}

static void watch_congestion_event(ngtcp2_cc *cc, ngtcp2_conn_stat *cstat, ngtcp2_tstamp sent_ts,
                                   const ngtcp2_cc_ack *ack, ngtcp2_tstamp ts)
{
  shim_t *s = shim_of_cc(cc);
  ngtcp2_tstamp before = cstat->congestion_recovery_start_ts;
  s->orig_congestion_event(cc, cstat, sent_ts, ack, ts);
  if (cstat->congestion_recovery_start_ts != before) s->congestion_events++;
}

static void watch_controller(shim_t *s)
{
  if (s->wrapped || s->conn == NULL) return;
  ngtcp2_cc *cc = ccd_ng_cc(s->conn);
  if (cc->on_ack_recv != NULL) {
    s->orig_on_ack_recv = cc->on_ack_recv;
    cc->on_ack_recv = watch_on_ack_recv;
  } else if (cc->on_pkt_acked != NULL) {
    s->orig_on_pkt_acked = cc->on_pkt_acked;
    cc->on_pkt_acked = watch_on_pkt_acked;
  }
  if (cc->congestion_event != NULL) {
    s->orig_congestion_event = cc->congestion_event;
    cc->congestion_event = watch_congestion_event;
  }
  s->wrapped = 1;
}

/* ------------------------------------------------------------ ngtcp2's callbacks */

static void rand_cb(uint8_t *dest, size_t destlen, const ngtcp2_rand_ctx *rand_ctx)
{
  fill((shim_t *)rand_ctx->native_handle, dest, destlen);
}

static int get_new_connection_id_cb(ngtcp2_conn *conn, ngtcp2_cid *cid, ngtcp2_stateless_reset_token *token,
                                    size_t cidlen, void *user_data)
{
  shim_t *s = user_data;
  (void)conn;
  uint8_t data[NGTCP2_MAX_CIDLEN];
  if (cidlen > sizeof(data)) return NGTCP2_ERR_CALLBACK_FAILURE;
  fill(s, data, cidlen);
  ngtcp2_cid_init(cid, data, cidlen);
  fill(s, token->data, sizeof(token->data));
  return 0;
}

static int get_path_challenge_data_cb(ngtcp2_conn *conn, ngtcp2_path_challenge_data *data, void *user_data)
{
  (void)conn;
  fill((shim_t *)user_data, data->data, sizeof(data->data));
  return 0;
}

static int recv_stream_data_cb(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t offset,
                               const uint8_t *data, size_t datalen, void *user_data, void *stream_user_data)
{
  shim_t *s = user_data;
  (void)offset;
  (void)data;
  (void)stream_user_data;
  if (!s->is_server) return 0;
  s->bytes_read += datalen;
  if (flags & NGTCP2_STREAM_DATA_FLAG_FIN) s->fin_read = 1;
  /* The application consumed it: give the window back, as ngtcp2's server
   * example does once its application has read the data. */
  ngtcp2_conn_extend_max_stream_offset(conn, stream_id, datalen);
  ngtcp2_conn_extend_max_offset(conn, datalen);
  return 0;
}

static int handshake_completed_cb(ngtcp2_conn *conn, void *user_data)
{
  (void)conn;
  ((shim_t *)user_data)->established = 1;
  return 0;
}

static void log_cb(void *user_data, const char *fmt, ...)
{
  shim_t *s = user_data;
  va_list ap;
  fprintf(stderr, "ngtcp2 %s: ", s->is_server ? "server" : "client");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* ------------------------------------------------------------ the qlog (qlog=PATH) */

static void qlog_put(shim_t *s, const void *data, size_t len)
{
  if (len > 0 && fwrite(data, 1, len, s->qlog) != len && !s->qlog_write_failed) {
    s->qlog_write_failed = errno ? errno : EIO;
  }
}

/* ngtcp2's settings.qlog_write: one record (or, with NGTCP2_QLOG_WRITE_FLAG_FIN and no
 * data, the end).  Every timed record starts with RS {"time":N (ngtcp2_qlog.c
 * qlog_write_time); N is (ts - initial_ts) / 1 ms.  The microseconds it dropped are
 * written after it as a fraction (the header's comment says why). */
static void qlog_write_cb(void *user_data, uint32_t flags, const void *data, size_t len)
{
  shim_t *s = user_data;
  static const char prefix[] = "\x1E{\"time\":";
  const size_t plen = sizeof(prefix) - 1;
  (void)flags;
  if (s->qlog == NULL) return;
  const char *p = data;
  if (len > plen && memcmp(p, prefix, plen) == 0) {
    size_t i = plen;
    uint64_t ms = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9') ms = ms * 10 + (uint64_t)(p[i++] - '0');
    uint64_t us = (s->ts - s->qlog_t0) / 1000; /* ts is whole microseconds (stamp()) */
    if (i > plen && i < len && (p[i] == ',' || p[i] == '}') && ms == us / 1000) {
      char frac[8];
      int n = us % 1000 ? snprintf(frac, sizeof(frac), ".%03u", (unsigned)(us % 1000)) : 0;
      qlog_put(s, p, i);
      qlog_put(s, frac, (size_t)n);
      qlog_put(s, p + i, len - i);
      return;
    }
    s->qlog_mismatches++;
  }
  qlog_put(s, data, len);
}

/* What ngtcp2's qlog does not say and the import needs (as the aioquic shim logs it):
 * at the connection's start, after ngtcp2's header record. */
static void qlog_parameters(shim_t *s, const ngtcp2_settings *settings)
{
  char rec[256];
  int n = snprintf(rec, sizeof(rec),
                   "\x1E{\"time\":0,\"name\":\"recovery:parameters_set\",\"data\":{\"max_datagram_size\":%zu,"
                   "\"initial_rtt\":%llu,\"written_by\":\"ccdiff connection shim\"}}\n",
                   s->mds, (unsigned long long)(settings->initial_rtt / NGTCP2_MILLISECONDS));
  if (s->ts != s->qlog_t0) s->qlog_mismatches++; /* time 0 is initial_ts, this call's */
  qlog_put(s, rec, (size_t)n);
}

/* A record of the shim's own at the current call's time, in ngtcp2's time format
 * (relative ms) with the microseconds. */
static void qlog_shim_record(shim_t *s, const char *name, const char *data)
{
  char rec[512];
  uint64_t us = (s->ts - s->qlog_t0) / 1000;
  int n = snprintf(rec, sizeof(rec), "\x1E{\"time\":%llu", (unsigned long long)(us / 1000));
  if (us % 1000) n += snprintf(rec + n, sizeof(rec) - (size_t)n, ".%03u", (unsigned)(us % 1000));
  n += snprintf(rec + n, sizeof(rec) - (size_t)n,
                ",\"name\":\"%s\",\"data\":{%s,\"written_by\":\"ccdiff connection shim\"}}\n", name, data);
  qlog_put(s, rec, (size_t)n);
}

/* After a write call of the client: did ngtcp2 mark the connection app-limited
 * (ngtcp2_conn.c:12125-12129)?  With CUBIC or Reno it is the only assignment of a
 * nonzero rst.app_limited (BBR's is ngtcp2_bbr.c:1196); an ACK only clears it
 * (ngtcp2_rst.c:86), and no ACK is read during a write. */
static void qlog_app_limited(shim_t *s, uint64_t before)
{
  if (s->qlog == NULL || s->is_server || s->conn == NULL || s->qlog_app_limited) return;
  uint64_t after = ccd_ng_rst_app_limited(s->conn);
  if (after == 0 || after == before) return;
  s->qlog_app_limited = 1;
  qlog_shim_record(s, "recovery:congestion_state_updated",
                   "\"new\":\"application_limited\",\"trigger\":\"a write found nothing to send "
                   "(ngtcp2_conn.c:12125-12129, rst.app_limited set)\"");
}

/* The client has stream data to write again after an application-limited period was
 * logged (the stream is open and holds unsent bytes; during the handshake it cannot be
 * opened yet): the controller's own state again.  From here ngtcp2's mark lasts until
 * what was in flight at the empty write is delivered (ngtcp2_rst.c:55-67), which the
 * adapter's copy of the rate sampler follows by itself. */
static void qlog_app_data(shim_t *s)
{
  if (s->qlog == NULL || s->conn == NULL || !s->qlog_app_limited) return;
  s->qlog_app_limited = 0;
  ngtcp2_conn_info ci;
  ngtcp2_conn_get_conn_info(s->conn, &ci);
  ngtcp2_tstamp start = ccd_ng_congestion_recovery_start_ts(s->conn);
  const char *state = (start != UINT64_MAX && s->last_acked_sent_ts <= start) ? "recovery"
                      : ci.cwnd < ci.ssthresh                                  ? "slow_start"
                                                                               : "congestion_avoidance";
  char data[160];
  snprintf(data, sizeof(data), "\"new\":\"%s\",\"trigger\":\"the application has data to send\"", state);
  qlog_shim_record(s, "recovery:congestion_state_updated", data);
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
  return ((shim_t *)ref->user_data)->conn;
}

static void callbacks(shim_t *s, ngtcp2_callbacks *cb)
{
  memset(cb, 0, sizeof(*cb));
  if (s->is_server) {
    cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
  } else {
    cb->client_initial = ngtcp2_crypto_client_initial_cb;
    cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
  }
  cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb->encrypt = ngtcp2_crypto_encrypt_cb;
  cb->decrypt = ngtcp2_crypto_decrypt_cb;
  cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb->update_key = ngtcp2_crypto_update_key_cb;
  cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb->rand = rand_cb;
  cb->get_new_connection_id2 = get_new_connection_id_cb;
  cb->get_path_challenge_data2 = get_path_challenge_data_cb;
  cb->recv_stream_data = recv_stream_data_cb;
  cb->handshake_completed = handshake_completed_cb;
}

static void settings_and_params(shim_t *s, ngtcp2_settings *settings, ngtcp2_transport_params *params)
{
  ngtcp2_settings_default(settings);
  settings->initial_ts = s->ts;
  settings->max_tx_udp_payload_size = s->mds;
  settings->no_tx_udp_payload_size_shaping = 1;
  settings->no_pmtud = 1;
  settings->cc_algo = s->reno ? NGTCP2_CC_ALGO_RENO : NGTCP2_CC_ALGO_CUBIC;
  settings->handshake_timeout = UINT64_MAX;
  settings->rand_ctx.native_handle = s;
  settings->max_window = 0;        /* no auto-tuning: the initial windows below */
  settings->max_stream_window = 0;
  if (s->debug) settings->log_printf = log_cb;
  if (s->qlog != NULL) {
    settings->qlog_write = qlog_write_cb;
    s->qlog_t0 = settings->initial_ts;
  }
  ngtcp2_transport_params_default(params);
  params->initial_max_data = FLOW_CONTROL;
  params->initial_max_stream_data_bidi_local = FLOW_CONTROL;
  params->initial_max_stream_data_bidi_remote = FLOW_CONTROL;
  params->initial_max_stream_data_uni = FLOW_CONTROL;
  params->initial_max_streams_bidi = 100;
  params->initial_max_streams_uni = 100;
  params->max_idle_timeout = 0;
  params->max_udp_payload_size = s->mds;
  params->active_connection_id_limit = 7;
}

static int tls_session(shim_t *s, const char *cert, const char *key, char *why, size_t why_len)
{
  int rv;
  unsigned flags = (s->is_server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_END_OF_EARLY_DATA | GNUTLS_NO_TICKETS;
  if ((rv = gnutls_certificate_allocate_credentials(&s->cred)) != 0) goto fail;
  if (s->is_server && (rv = gnutls_certificate_set_x509_key_file(s->cred, cert, key, GNUTLS_X509_FMT_PEM)) != 0) {
    snprintf(why, why_len, "GnuTLS cannot load cert=%.400s key=%.400s: %s", cert, key, gnutls_strerror(rv));
    return -1;
  }
  if ((rv = gnutls_init(&s->session, flags)) != 0) goto fail;
  const char *where = NULL;
  if ((rv = gnutls_priority_set_direct(s->session, PRIORITY, &where)) != 0) {
    snprintf(why, why_len, "GnuTLS priority string refused at \"%s\": %s", where ? where : "?", gnutls_strerror(rv));
    return -1;
  }
  if ((rv = gnutls_credentials_set(s->session, GNUTLS_CRD_CERTIFICATE, s->cred)) != 0) goto fail;
  gnutls_datum_t alpn = {(unsigned char *)ALPN, sizeof(ALPN) - 1};
  if ((rv = gnutls_alpn_set_protocols(s->session, &alpn, 1, GNUTLS_ALPN_MANDATORY)) != 0) goto fail;
  if (!s->is_server && (rv = gnutls_server_name_set(s->session, GNUTLS_NAME_DNS, SNI, sizeof(SNI) - 1)) != 0) {
    goto fail;
  }
  s->ref.conn_ref.get_conn = get_conn;
  s->ref.conn_ref.user_data = s;
  gnutls_session_set_ptr(s->session, &s->ref);
  rv = s->is_server ? ngtcp2_crypto_gnutls_configure_server_session(s->session)
                    : ngtcp2_crypto_gnutls_configure_client_session(s->session);
  if (rv != 0) {
    snprintf(why, why_len, "configuring the GnuTLS session for QUIC failed");
    return -1;
  }
  return 0;
fail:
  snprintf(why, why_len, "GnuTLS: %s", gnutls_strerror(rv));
  return -1;
}

/* ------------------------------------------------------------ options */

/* The contract's options and this shim's own: ccd_parse_options fills `base`, and the
 * hook reaches the rest through it (base is the first member). */
typedef struct {
  ccd_options_t base;
  char qlog[1024];
} ng_options_t;

/* ngtcp2's own options beside the contract's (ccd_parse_options). */
static int ngtcp2_option(const char *k, const char *v, ccd_options_t *o, char *err, size_t err_len)
{
  if (strcmp(k, "cc") == 0) {
    if (strcmp(v, "cubic") == 0) {
      o->reno = 0;
    } else if (strcmp(v, "reno") == 0) {
      o->reno = 1;
    } else {
      snprintf(err, err_len, "cc=%s: ngtcp2's connection shim has cubic and reno (BBR is not a loss-based controller)",
               v);
      return -1;
    }
    return 0;
  }
  if (strcmp(k, "qlog") == 0) {
    ng_options_t *ng = (ng_options_t *)o;
    if (v[0] == 0 || strlen(v) >= sizeof(ng->qlog)) {
      snprintf(err, err_len, "qlog=%.200s: expected a path shorter than %zu bytes", v, sizeof(ng->qlog));
      return -1;
    }
    snprintf(ng->qlog, sizeof(ng->qlog), "%s", v);
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------ the C ABI */

SHIM_EXPORT uint32_t ccd_conn_abi_version(void)
{
  return CCD_CONN_ABI_VERSION;
}

SHIM_EXPORT void ccd_conn_free(void *conn)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return;
  if (s->conn != NULL) ngtcp2_conn_del(s->conn);
  if (s->session != NULL) gnutls_deinit(s->session);
  if (s->cred != NULL) gnutls_certificate_free_credentials(s->cred);
  if (s->qlog != NULL) fclose(s->qlog); /* after ngtcp2_conn_del: its last write (the FIN) is done */
  free(s);
}

SHIM_EXPORT void *ccd_conn_new(int is_server, uint64_t now_us, uint64_t seed, const char *options, char *err,
                               size_t err_len)
{
  char why[1200];
  char dummy[2];
  if (err == NULL || err_len == 0) {
    err = dummy;
    err_len = sizeof(dummy);
  }
  ng_options_t ng;
  ccd_options_t o;
  memset(&ng, 0, sizeof(ng));
  why[0] = 0;
  if (ccd_parse_options(options, &ng.base, "ngtcp2", OPTIONS, MIN_MDS, MAX_MDS, "RFC 9000 §14, §18.2", ngtcp2_option,
                        why, sizeof(why)) != 0) {
    snprintf(err, err_len, "ngtcp2: %s", why);
    return NULL;
  }
  o = ng.base;
  if (is_server) {
    if (o.cert[0] == 0 || o.key[0] == 0) {
      snprintf(err, err_len, "ngtcp2: the server needs cert=PATH and key=PATH");
      return NULL;
    }
    if (!ccd_readable(o.cert) || !ccd_readable(o.key)) {
      snprintf(err, err_len, "ngtcp2: cannot read %s=%s", ccd_readable(o.cert) ? "key" : "cert",
               ccd_readable(o.cert) ? o.key : o.cert);
      return NULL;
    }
  }
  shim_t *s = calloc(1, sizeof(shim_t));
  if (s == NULL) {
    snprintf(err, err_len, "ngtcp2: out of memory");
    return NULL;
  }
  s->is_server = is_server != 0;
  s->reno = o.reno;
  s->mds = o.mds;
  s->stream_id = -1;
  s->last_acked_sent_ts = 0;
  s->debug = getenv("CCDIFF_NGTCP2_DEBUG") != NULL;
  s->rng = seed ^ (s->is_server ? 0x5345525645522121ull : 0x434c49454e542121ull);
  enter(s, now_us);
  if (ng.qlog[0] != 0 && (s->qlog = fopen(ng.qlog, "wb")) == NULL) {
    snprintf(err, err_len, "ngtcp2: qlog=%s: %s", ng.qlog, strerror(errno));
    free(s);
    return NULL;
  }

  s->self_addr.sin_family = AF_INET;
  s->peer_addr.sin_family = AF_INET;
  struct sockaddr_in *client = s->is_server ? &s->peer_addr : &s->self_addr;
  struct sockaddr_in *server = s->is_server ? &s->self_addr : &s->peer_addr;
  client->sin_addr.s_addr = htonl(0xC0000201); /* 192.0.2.1 (RFC 5737) */
  client->sin_port = htons(50000);
  server->sin_addr.s_addr = htonl(0xC0000202); /* 192.0.2.2 */
  server->sin_port = htons(4433);
  s->path.local.addr = (ngtcp2_sockaddr *)&s->self_addr;
  s->path.local.addrlen = sizeof(s->self_addr);
  s->path.remote.addr = (ngtcp2_sockaddr *)&s->peer_addr;
  s->path.remote.addrlen = sizeof(s->peer_addr);

  if (tls_session(s, o.cert, o.key, why, sizeof(why)) != 0) {
    snprintf(err, err_len, "ngtcp2: %s", why);
    ccd_conn_free(s);
    return NULL;
  }
  if (!s->is_server) {
    ngtcp2_callbacks cb;
    ngtcp2_settings settings;
    ngtcp2_transport_params params;
    callbacks(s, &cb);
    settings_and_params(s, &settings, &params);
    uint8_t d[NGTCP2_MIN_INITIAL_DCIDLEN + 10], c[CID_LEN];
    fill(s, d, sizeof(d));
    fill(s, c, sizeof(c));
    ngtcp2_cid dcid, scid;
    ngtcp2_cid_init(&dcid, d, sizeof(d));
    ngtcp2_cid_init(&scid, c, sizeof(c));
    int rv = ngtcp2_conn_client_new(&s->conn, &dcid, &scid, &s->path, NGTCP2_PROTO_VER_V1, &cb, &settings, &params,
                                    NULL, s);
    if (rv != 0) {
      snprintf(err, err_len, "ngtcp2: ngtcp2_conn_client_new: %s", ngtcp2_strerror(rv));
      ccd_conn_free(s);
      return NULL;
    }
    ngtcp2_conn_set_tls_native_handle(s->conn, s->session);
    watch_controller(s);
    if (s->qlog != NULL) qlog_parameters(s, &settings);
  }
  if (leave(s, "ccd_conn_new") != 0) {
    snprintf(err, err_len, "ngtcp2: %s", s->err);
    ccd_conn_free(s);
    return NULL;
  }
  return s;
}

/* The server's connection, made from the client's first Initial (ngtcp2_accept). */
static int accept_first(shim_t *s, const uint8_t *data, size_t len)
{
  ngtcp2_pkt_hd hd;
  int rv = ngtcp2_accept(&hd, data, len);
  if (rv != 0) return 0; /* not an acceptable first packet: dropped, as a server would */
  ngtcp2_callbacks cb;
  ngtcp2_settings settings;
  ngtcp2_transport_params params;
  callbacks(s, &cb);
  settings_and_params(s, &settings, &params);
  settings.token = hd.token;
  settings.tokenlen = hd.tokenlen;
  params.original_dcid = hd.dcid;
  params.original_dcid_present = 1;
  uint8_t c[CID_LEN];
  fill(s, c, sizeof(c));
  ngtcp2_cid scid;
  ngtcp2_cid_init(&scid, c, sizeof(c));
  rv = ngtcp2_conn_server_new(&s->conn, &hd.scid, &scid, &s->path, hd.version, &cb, &settings, &params, NULL, s);
  if (rv != 0) {
    set_err(s, "ngtcp2_conn_server_new: %s", ngtcp2_strerror(rv));
    return -1;
  }
  ngtcp2_conn_set_tls_native_handle(s->conn, s->session);
  watch_controller(s);
  if (s->qlog != NULL) qlog_parameters(s, &settings);
  return 0;
}

SHIM_EXPORT int ccd_conn_recv(void *conn, const uint8_t *data, size_t len, uint64_t now_us)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  if (data == NULL && len > 0) {
    set_err(s, "recv: NULL data");
    return -1;
  }
  if (s->conn == NULL) {
    if (!s->is_server) {
      set_err(s, "recv: the client has no connection");
      return -1;
    }
    if (accept_first(s, data, len) != 0) return -1;
    if (s->conn == NULL) return leave(s, "ccd_conn_recv");
  }
  if (s->closed) return leave(s, "ccd_conn_recv");
  ngtcp2_pkt_info pi;
  memset(&pi, 0, sizeof(pi));
  int rv = ngtcp2_conn_read_pkt(s->conn, &s->path, &pi, data, len, s->ts);
  if (leave(s, "ccd_conn_recv") != 0) return -1;
  switch (rv) {
  case 0:
  case NGTCP2_ERR_DISCARD_PKT:
    return 0;
  case NGTCP2_ERR_DRAINING:
  case NGTCP2_ERR_CLOSING:
    s->closed = 1;
    return 0;
  default: {
    ccd_gnutls_ref *ref = &s->ref;
    set_err(s, "ngtcp2_conn_read_pkt: %s%s%s (tls alert %u)", ngtcp2_strerror(rv),
            ref->last_gnutls_error ? "; GnuTLS: " : "",
            ref->last_gnutls_error ? gnutls_strerror(ref->last_gnutls_error) : "",
            (unsigned)ngtcp2_conn_get_tls_alert2(s->conn));
    s->closed = 1;
    return -1;
  }
  }
}

static uint64_t to_us(ngtcp2_tstamp t)
{
  if (t == UINT64_MAX) return CCD_CONN_NO_TIMER;
  ngtcp2_tstamp base = (ngtcp2_tstamp)CCD_CONN_CLOCK_BASE_US * 1000ull;
  if (t <= base) return 0;
  uint64_t us = (t - base + 999) / 1000; /* up: the timer is due when the harness calls it */
  return us >= CCD_CONN_NO_TIMER ? CCD_CONN_NO_TIMER - 1 : us;
}

/* One packet: stream data while there is some to send, else whatever ngtcp2
 * has (ACKs, handshake, retransmissions, probes). */
static ngtcp2_ssize write_one(shim_t *s, uint8_t *buf, size_t cap)
{
  ngtcp2_pkt_info pi;
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  if (!s->is_server && !s->stream_open && (s->offered > 0 || s->fin_wanted)) {
    int64_t id;
    int rv = ngtcp2_conn_open_bidi_stream(s->conn, &id, NULL);
    if (rv == 0) {
      s->stream_id = id;
      s->stream_open = 1;
    } else if (rv != NGTCP2_ERR_STREAM_ID_BLOCKED) {
      set_err(s, "ngtcp2_conn_open_bidi_stream: %s", ngtcp2_strerror(rv));
      return -1;
    }
  }
  int has_data = !s->is_server && s->stream_open && (s->written < s->offered || (s->fin_wanted && !s->fin_written));
  if (has_data) {
    qlog_app_data(s);
    uint64_t remaining = s->offered - s->written;
    size_t chunk = remaining < ZEROS ? (size_t)remaining : ZEROS;
    ngtcp2_vec v = {(uint8_t *)zeros, chunk};
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_NONE;
    if (s->fin_wanted && s->written + chunk == s->offered) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
    ngtcp2_ssize pdatalen = -1;
    ngtcp2_ssize n = ngtcp2_conn_writev_stream(s->conn, &ps.path, &pi, buf, cap, &pdatalen, flags, s->stream_id,
                                               &v, chunk > 0 ? 1 : 0, s->ts);
    if (n >= 0) {
      if (pdatalen >= 0) {
        s->written += (uint64_t)pdatalen;
        if ((flags & NGTCP2_WRITE_STREAM_FLAG_FIN) && s->written == s->offered) s->fin_written = 1;
      }
      return n;
    }
    if (n != NGTCP2_ERR_STREAM_DATA_BLOCKED && n != NGTCP2_ERR_STREAM_SHUT_WR) return n;
    /* Flow control (never, with 4 GiB) or a closed stream: send without data. */
  }
  return ngtcp2_conn_write_pkt(s->conn, &ps.path, &pi, buf, cap, s->ts);
}

SHIM_EXPORT int64_t ccd_conn_send(void *conn, uint8_t *buf, size_t cap, uint64_t now_us, uint64_t *send_at_us)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  if (send_at_us != NULL) *send_at_us = now_us;
  if (buf == NULL || cap < s->mds) {
    set_err(s, "send: the buffer must hold at least mds=%zu bytes", s->mds);
    return -1;
  }
  if (s->conn == NULL || s->closed) return leave(s, "ccd_conn_send") == 0 ? 0 : -1;
  size_t mds = s->mds;
  size_t quantum = ngtcp2_conn_get_send_quantum2(s->conn);
  size_t max_burst = quantum / mds > 1 ? quantum / mds : 1;
  if (s->burst >= max_burst) {
    /* the burst is over: ngtcp2's pacer spaces the next one */
    ngtcp2_conn_update_pkt_tx_time(s->conn, s->ts);
    s->burst = 0;
  }
  uint64_t app_limited_before = ccd_ng_rst_app_limited(s->conn);
  ngtcp2_ssize n = write_one(s, buf, mds);
  if (n >= 0) qlog_app_limited(s, app_limited_before);
  if (leave(s, "ccd_conn_send") != 0) return -1;
  if (n < 0) {
    if (n == NGTCP2_ERR_CLOSING || n == NGTCP2_ERR_DRAINING) {
      s->closed = 1;
      return 0;
    }
    if (s->err[0] == 0) set_err(s, "ngtcp2_conn_writev_stream: %s", ngtcp2_strerror((int)n));
    return -1;
  }
  if (n == 0) {
    if (s->burst > 0) {
      ngtcp2_conn_update_pkt_tx_time(s->conn, s->ts);
      s->burst = 0;
    }
    return 0;
  }
  if ((size_t)n > mds) {
    set_err(s, "ngtcp2 wrote a %zd-byte datagram, over mds=%zu", (ssize_t)n, mds);
    return -1;
  }
  s->burst++;
  s->bytes_sent += (uint64_t)n;
  return (int64_t)n;
}

SHIM_EXPORT uint64_t ccd_conn_timeout(void *conn, uint64_t now_us)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return CCD_CONN_NO_TIMER;
  enter(s, now_us);
  if (s->conn == NULL || s->closed) return CCD_CONN_NO_TIMER;
  ngtcp2_tstamp expiry = ngtcp2_conn_get_expiry2(s->conn);
  if (leave(s, "ccd_conn_timeout") != 0) return CCD_CONN_NO_TIMER;
  return to_us(expiry);
}

SHIM_EXPORT int ccd_conn_on_timeout(void *conn, uint64_t now_us)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  if (s->conn == NULL || s->closed) return leave(s, "ccd_conn_on_timeout");
  int rv = ngtcp2_conn_handle_expiry(s->conn, s->ts);
  if (leave(s, "ccd_conn_on_timeout") != 0) return -1;
  if (rv != 0) {
    set_err(s, "ngtcp2_conn_handle_expiry: %s", ngtcp2_strerror(rv));
    s->closed = 1;
    return -1;
  }
  return 0;
}

SHIM_EXPORT int64_t ccd_conn_write(void *conn, uint64_t len, int fin, uint64_t now_us)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  if (s->is_server) {
    set_err(s, "write: the server does not write (the client is the data sender)");
    return -1;
  }
  if (s->fin_wanted) {
    if (len == 0) return 0;
    set_err(s, "write after the stream's end");
    return -1;
  }
  if (len > (uint64_t)INT64_MAX - s->offered) {
    set_err(s, "write: too many bytes");
    return -1;
  }
  if (s->closed) return 0;
  /* The bytes are zeros that ngtcp2 reads from a static buffer when it builds a
   * packet: all of them are accepted. */
  s->offered += len;
  if (fin) s->fin_wanted = 1;
  if (leave(s, "ccd_conn_write") != 0) return -1;
  return (int64_t)len;
}

SHIM_EXPORT int64_t ccd_conn_read(void *conn, uint64_t now_us)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  /* The server's application reads in recv_stream_data, during ngtcp2_conn_read_pkt. */
  if (leave(s, "ccd_conn_read") != 0) return -1;
  return (int64_t)s->bytes_read;
}

static uint64_t rtt_us(ngtcp2_duration d)
{
  return d == UINT64_MAX ? CCD_CONN_UNKNOWN : d / 1000;
}

SHIM_EXPORT int ccd_conn_stats(void *conn, ccd_conn_stats_t *out)
{
  shim_t *s = (shim_t *)conn;
  if (s == NULL) return -1;
  if (out == NULL) {
    set_err(s, "stats: NULL out");
    return -1;
  }
  s->clock_reads_at_entry = real_clock_reads;
  ccd_conn_stats_t st;
  st.cwnd = CCD_CONN_UNKNOWN;
  st.bytes_in_flight = CCD_CONN_UNKNOWN;
  st.ssthresh = CCD_CONN_UNKNOWN;
  st.smoothed_rtt_us = CCD_CONN_UNKNOWN;
  st.min_rtt_us = CCD_CONN_UNKNOWN;
  st.latest_rtt_us = CCD_CONN_UNKNOWN;
  st.packets_sent = 0;
  st.packets_lost = 0;
  st.bytes_sent = s->bytes_sent;
  st.congestion_events = s->congestion_events;
  st.in_recovery = 0;
  st.stream_bytes_read = s->bytes_read;
  st.stream_fin_read = (uint64_t)s->fin_read;
  st.established = (uint64_t)s->established;
  st.closed = (uint64_t)s->closed;
  if (s->conn != NULL) {
    ngtcp2_conn_info ci;
    ngtcp2_conn_get_conn_info(s->conn, &ci);
    st.cwnd = ci.cwnd;
    st.bytes_in_flight = ci.bytes_in_flight;
    st.ssthresh = ci.ssthresh == UINT64_MAX ? CCD_CONN_UNKNOWN : ci.ssthresh;
    if (ccd_ng_first_rtt_sample_ts(s->conn) != UINT64_MAX) {
      st.smoothed_rtt_us = rtt_us(ci.smoothed_rtt);
      st.min_rtt_us = rtt_us(ci.min_rtt);
      st.latest_rtt_us = rtt_us(ci.latest_rtt);
    }
    st.packets_sent = ci.pkt_sent;
    st.packets_lost = ci.pkt_lost;
    ngtcp2_tstamp start = ccd_ng_congestion_recovery_start_ts(s->conn);
    st.in_recovery = (start != UINT64_MAX && s->last_acked_sent_ts <= start) ? 1 : 0;
  }
  *out = st;
  if (real_clock_reads != s->clock_reads_at_entry) {
    set_err(s, "ngtcp2 read the real clock during ccd_conn_stats");
    return -1;
  }
  return 0;
}

SHIM_EXPORT const char *ccd_conn_last_error(void *conn)
{
  shim_t *s = (shim_t *)conn;
  return s == NULL ? "" : s->err;
}
