/*
 * ccdiff connection shim for picoquic: picoquic's own client and server, one
 * picoquic_quic_t each, behind implementations/include/ccdiff_connection.h
 * (ABI 1; docs/connection-mode.md).
 *
 * Each handle is one QUIC context (picoquic_create) and, once it exists, its one
 * connection, driven as picoquic's own test suite drives its simulated links
 * (picoquictest/tls_api_test.c: tls_api_init_ctx_ex2, tls_api_one_sim_round,
 * tls_api_client_departure): datagrams in through picoquic_incoming_packet_ex,
 * datagrams out through picoquic_prepare_next_packet_ex (one datagram per call,
 * no GSO: send_msg_size NULL), timers through picoquic_get_next_wake_time.
 * picoquic has no separate timer entry point: its loss detection, PTO, ACK delay,
 * pacing and idle timers all run inside prepare_packet when the connection's wake
 * time is due, so ccd_conn_on_timeout only advances the clock and the harness's
 * next ccd_conn_send does the work (as the test loop's "departure" does).
 * Everything between the datagrams is picoquic's: TLS 1.3 through picotls with
 * OpenSSL, packet protection, loss detection (RACK and timers), PTO, its ACK
 * policy (ACK frequency included), its pacer, and picoquic_cubic_algorithm or
 * picoquic_newreno_algorithm.  Nothing of picoquic is modified.
 *
 * Time.  Both contexts run in picoquic's "simulated time" mode (picoquic.h,
 * "Time management"): picoquic_create gets p_simulated_time, a per-handle
 * counter this shim sets to CCD_CONN_CLOCK_BASE_US + now_us at the entry of
 * every call.  picoquic_get_quic_time then reads that counter (quicctx.c:4365-
 * 4376) and picotls's get_time callback is replaced by one reading it too
 * (tls_api.c:2047-2066, picoquic_set_time_getter_in_ctx).  Checked for picoquic
 * 1.1.53.0 by grep over picoquic/ and picotls/lib/: picoquic_current_time() is
 * called only by quicctx.c:4370 (picoquic_get_quic_time, only when no simulated
 * clock is set), sockloop.c:2680/2741 and picosocks.c:1259 (the socket loop, not
 * called here); clock_gettime/gettimeofday appear only in picoquic_current_time
 * (quicctx.c:4351/4355), util.c:1157 (thread waits, unused), picotls.c:6639
 * (ptls_get_time, replaced) and picotls.c:7175 (picotls's own logging, off).
 * And at run time: the shim is linked with --wrap for gettimeofday, clock_gettime
 * and time, so every read of the real clock by picoquic or picotls is counted;
 * a call during which the count moves fails with "read the real clock".
 *
 * Randomness.  picoquic's non-cryptographic generator (picoquic_public_random,
 * tls_api.c:1020-1110: skipped packet numbers against optimistic ACKs, the spin
 * bit, stateless-reset padding) is process-global; each ccd_conn_new reseeds it
 * from the run's seed and role with picoquic_public_random_seed_64(seed, reset=1),
 * and sets the context's use_predictable_random (as picoquictest/multipath_test.c
 * does) so that the handshake does not reseed it from the crypto generator
 * (sender.c:2387).  The first packet number of the Initial space is not
 * randomised (picoquic_set_random_initial(0), as every picoquic test context
 * does: tls_api_test.c:1194).  Connection IDs (the client's initial one included)
 * and the stateless-reset seed come from a splitmix64 stream seeded from the run's
 * seed and role (seeded_cid, fill_seeded): picoquic-log's qlog prints them.  TLS
 * secrets and ticket keys come from OpenSSL's generator: their values change from
 * run to run, their sizes do not, so the datagrams' sizes and times are the same.
 * qlog=PATH (the client's): picoquic-log's own qlog writer ("the qlog" below).
 *
 * Configuration (both contexts).  mds: picoquic_set_mtu_max(mds + 28, IPv4's
 * overhead) and the max_udp_payload_size parameter mds; the path's send_mtu is
 * set to mds when the connection is made (picoquic starts every path at 1252,
 * quicctx.c:1948, and would otherwise find mds by probing), so full datagrams are
 * exactly mds.  picoquic's MTU discovery stays on (its default, "basic"), bounded
 * by mtu_max: it sends no probe while send_mtu is mds; it probes back to mds
 * after picoquic resets the path MTU to 1252 on a timer loss or repeated losses
 * of full-size packets (loss_recovery.c:872-892).  When mds < 1252 that reset
 * would send datagrams larger than the path's MTU (mds): after every call the
 * shim holds send_mtu at mds (counted; with the initial send_mtu, the only writes
 * to a connection's state).  A datagram above mds would be an error (never seen).  Stream and connection flow control 4 GiB; no idle
 * timeout (max_idle_timeout 0), handshake timeout 600 s; ALPN "ccdiff"; the
 * congestion controller from cc=cubic (default) or cc=reno|newreno.  The server
 * uses cert/key (PEM; the committed Ed25519 test certificate: picotls-openssl
 * signs with Ed25519, openssl.c:1178-1190); the client does not verify the
 * certificate but checks the handshake signature made with its key ("the
 * client's verifier" below: picotls's list of signature algorithms without a
 * verifier has no Ed25519).  Everything else is picoquic's
 * default (ACK frequency, optimistic-ACK holes, spin bit, loss bit).
 *
 * State read (ccd_conn_stats), the connection's path[0] (picoquic_internal.h):
 * cwin, bytes_in_transit, smoothed_rtt / rtt_min / rtt_sample (unknown until
 * rtt_is_initialized).  ssthresh from the controller's own
 * state (picoquic_cubic_state_t.ssthresh, picoquic_newreno_state_t.nrss.ssthresh;
 * UINT64_MAX = not set = unknown); their layouts are private to cubic.c and
 * newreno.c, so build.sh copies the two typedefs into a generated header at build
 * time (never committed).  in_recovery is picoquic's own rule: its controllers
 * mark a recovery period by a packet number (recovery_sequence, the next packet
 * number when the window was reduced: cubic.c:152, newreno.c:69): a loss is a new
 * event when the lost packet is numbered at or above it (cubic.c:333,
 * newreno.c:123), and the period is over once such a packet is acknowledged
 * (recovery_sequence <= highest acknowledged: cubic.c:323, newreno.c:131);
 * picoquic_cubic_alg_recovery itself is never entered (cubic.c:274-276).  So:
 * in recovery = a congestion event happened and recovery_sequence > the highest
 * acknowledged packet number (picoquic_cc_get_ack_number).  packets_sent =
 * cnx->nb_packets_sent (datagrams), packets_lost = cnx->nb_retransmission_total
 * (packets declared lost, loss_recovery.c:903-905), bytes_sent = the bytes of
 * every datagram this shim returned; congestion_events: picoquic does not count
 * them (unknown).
 *
 * CCDIFF_PICOQUIC_DEBUG=1 in the environment: picoquic's DBG_PRINTF stays on, and
 * the shim writes each endpoint's connection events, its close reason (picoquic's
 * local and remote error codes) and how often it held send_mtu at mds to stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/time.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "picotls.h"
#include "picoquic.h"
#include "picoquic_internal.h"
#include "picoquic_utils.h"
#include "picoquic_cubic.h"
#include "picoquic_qlog.h" /* picoquic_set_qlog: loglib/qlog_fns.c, picoquic-log */
#include "picoquic_newreno.h"
#include "tls_api.h"
#include "cc_common.h"
#include "ccdiff_pq_private.h" /* generated by build.sh from cubic.c and newreno.c */
#include "ccdiff_connection.h"
#include "ccdiff_connection_c.h" /* the real-clock wrappers, splitmix64, the options */

#define SHIM_EXPORT __attribute__((visibility("default")))
#define ALPN "ccdiff"
#define SNI "ccdiff.test"
#define OPTIONS "mds, cert, key, cc=cubic|reno, qlog=PATH"
#define FLOW_CONTROL (1ull << 32)
#define HANDSHAKE_TIMEOUT_US 600000000ull
#define IPV4_OVERHEAD 28 /* PICOQUIC_MTU_OVERHEAD for AF_INET */
#define MIN_MDS 1200     /* RFC 9000 §14 */
#define MAX_MDS PICOQUIC_MAX_PACKET_SIZE /* picoquic's packet buffers (1536) */
#define SEND_RETRIES 16

/* ------------------------------------------------------------ the endpoint */

typedef struct {
  int is_server;
  int reno;
  size_t mds;
  uint64_t sim_time; /* picoquic's simulated clock: CCD_CONN_CLOCK_BASE_US + now */
  picoquic_quic_t* quic;
  picoquic_cnx_t* cnx; /* the client's connection; the server's is looked up */
  picoquic_cnx_t* mtu_set_for;
  struct sockaddr_in self_addr;
  struct sockaddr_in peer_addr;
  /* the client's application: bytes offered, bytes handed to picoquic */
  uint64_t offered;
  uint64_t provided;
  int fin_wanted;
  int fin_given;
  /* the server's application */
  uint64_t bytes_read;
  int fin_read;
  uint64_t bytes_sent;
  uint64_t mtu_clamps;
  int established;
  int closed;
  int debug; /* CCDIFF_PICOQUIC_DEBUG set */
  char close_reason[160];
  /* qlog=PATH: picoquic-log's qlog writer (loglib/qlog_fns.c) writes
   * <qlog_dir>/<initial CID in hex>.client.qlog; ccd_conn_free moves it to qlog_path. */
  char qlog_path[1024];
  char qlog_dir[1100];
  char qlog_file[1300];
  uint64_t clock_reads_at_entry;
  uint64_t cid_state; /* splitmix64 state for connection IDs (seeded_cid) */
  char err[512];
} shim_t;

/* Connection IDs and the stateless-reset seed from the run's seed, not OpenSSL's
 * generator: they change no size or time, but picoquic-log's qlog prints them (every
 * packet's dcid, NEW_CONNECTION_ID frames with their reset tokens, the transport
 * parameters, the trace's description), so with them seeded two runs give a
 * byte-identical qlog.  picoquic calls this after drawing a random CID
 * (picoquic_create_local_cnx_id, quicctx.c:1746-1754): the random one is replaced. */
static void fill_seeded(uint64_t* state, uint8_t* out, size_t n)
{
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = splitmix64(state);
    for (size_t j = 0; j < 8 && i + j < n; j++) out[i + j] = (uint8_t)(x >> (8 * j));
  }
}

static void seeded_cid(picoquic_quic_t* quic, picoquic_connection_id_t cnx_id_local,
                       picoquic_connection_id_t cnx_id_remote, void* ctx, picoquic_connection_id_t* returned)
{
  (void)quic;
  (void)cnx_id_remote;
  shim_t* s = (shim_t*)ctx;
  *returned = cnx_id_local;
  fill_seeded(&s->cid_state, returned->id, cnx_id_local.id_len);
}

static void set_err(shim_t* s, const char* fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof(s->err), fmt, ap);
  va_end(ap);
  for (char* p = s->err; *p; p++) {
    if (*p == '\n' || *p == '\r') *p = ' ';
  }
}

static picoquic_cnx_t* connection(shim_t* s)
{
  /* The server's connection is created by picoquic_incoming_packet_ex and deleted
   * by picoquic_prepare_next_packet_ex once disconnected (sender.c:3957): look it
   * up each time.  There is only ever one. */
  return s->is_server ? picoquic_get_first_cnx(s->quic) : s->cnx;
}

static int enter(shim_t* s, uint64_t now_us)
{
  s->sim_time = (uint64_t)CCD_CONN_CLOCK_BASE_US + now_us;
  s->err[0] = 0;
  s->clock_reads_at_entry = real_clock_reads;
  return 0;
}

/* After every call into picoquic: the MTU rule, the connection's state, and the
 * real-clock guard.  Returns -1 when picoquic read the real clock. */
static int leave(shim_t* s, const char* what)
{
  picoquic_cnx_t* cnx = connection(s);
  if (cnx != NULL) {
    picoquic_path_t* path = cnx->path != NULL && cnx->nb_paths > 0 ? cnx->path[0] : NULL;
    if (path != NULL) {
      if (cnx != s->mtu_set_for) {
        path->send_mtu = s->mds;
        s->mtu_set_for = cnx;
      } else if (path->send_mtu > s->mds) {
        path->send_mtu = s->mds;
        s->mtu_clamps++;
      }
    }
    picoquic_state_enum st = picoquic_get_cnx_state(cnx);
    if (st >= picoquic_state_client_ready_start && st <= picoquic_state_ready) {
      s->established = 1;
    }
    if (st >= picoquic_state_disconnecting && !s->closed) {
      s->closed = 1;
      snprintf(s->close_reason, sizeof(s->close_reason), "local error 0x%llx, remote error 0x%llx, application error 0x%llx",
               (unsigned long long)picoquic_get_local_error(cnx), (unsigned long long)picoquic_get_remote_error(cnx),
               (unsigned long long)picoquic_get_application_error(cnx));
      if (s->debug) {
        fprintf(stderr, "picoquic %s closed at %llu: %s\n", s->is_server ? "server" : "client",
                (unsigned long long)(s->sim_time - CCD_CONN_CLOCK_BASE_US), s->close_reason);
      }
    }
  } else if (s->is_server && s->mtu_set_for != NULL) {
    s->closed = 1; /* deleted after it disconnected */
  }
  if (real_clock_reads != s->clock_reads_at_entry) {
    set_err(s, "picoquic read the real clock %llu time(s) during %s: virtual time is broken",
            (unsigned long long)(real_clock_reads - s->clock_reads_at_entry), what);
    return -1;
  }
  return 0;
}

static int shim_callback(picoquic_cnx_t* cnx, uint64_t stream_id, uint8_t* bytes, size_t length,
                         picoquic_call_back_event_t event, void* callback_ctx, void* stream_ctx)
{
  shim_t* s = (shim_t*)callback_ctx;
  (void)cnx;
  (void)stream_ctx;
  if (s == NULL) return 0;
  if (s->debug && event != picoquic_callback_prepare_to_send &&
      event != picoquic_callback_stream_data) {
    fprintf(stderr, "picoquic %s: event %d stream %llu length %zu state %d local 0x%llx remote 0x%llx\n",
            s->is_server ? "server" : "client", (int)event, (unsigned long long)stream_id, length,
            cnx ? (int)picoquic_get_cnx_state(cnx) : -1,
            cnx ? (unsigned long long)picoquic_get_local_error(cnx) : 0ull,
            cnx ? (unsigned long long)picoquic_get_remote_error(cnx) : 0ull);
  }
  switch (event) {
  case picoquic_callback_stream_data:
  case picoquic_callback_stream_fin:
    if (s->is_server && stream_id == 0) {
      s->bytes_read += length;
      if (event == picoquic_callback_stream_fin) s->fin_read = 1;
    }
    break;
  case picoquic_callback_prepare_to_send:
    if (!s->is_server && stream_id == 0) {
      /* The application's bytes are zeros, written straight into picoquic's
       * packet (picoquic_provide_stream_data_buffer): nothing is buffered here. */
      uint64_t available = s->offered - s->provided;
      size_t n = available < (uint64_t)length ? (size_t)available : length;
      int fin = s->fin_wanted && s->provided + n == s->offered;
      int still_active = !fin && s->provided + n < s->offered;
      if (n == 0 && !fin) {
        return 0; /* nothing now: picoquic marks the stream inactive */
      }
      uint8_t* buffer = picoquic_provide_stream_data_buffer(bytes, n, fin, still_active);
      if (buffer == NULL) {
        set_err(s, "picoquic_provide_stream_data_buffer refused %zu bytes (allowed %zu)", n, length);
        return -1;
      }
      memset(buffer, 0, n);
      s->provided += n;
      if (fin) s->fin_given = 1;
    }
    break;
  case picoquic_callback_stateless_reset:
  case picoquic_callback_close:
  case picoquic_callback_application_close:
    s->closed = 1;
    break;
  default:
    break;
  }
  return 0;
}

/* ------------------------------------------------------------ the client's verifier */

/* The client trusts the certificate the server presents (a self-signed test
 * certificate: no CA) but checks the handshake signature made with its key, as
 * quinn's shim does.  picotls's own list of signature algorithms, sent when no
 * verifier is set, has no Ed25519 (picotls.c:1991-2000, push_signature_algorithms):
 * with picoquic_set_null_verifier the server's Ed25519 key has no common algorithm
 * and the handshake fails (alert 40, handshake_failure).  A verifier with its own
 * list, as picoquic's tests install one (tls_api_test.c:5543-5561,
 * set_verify_certificate_callback_test), fixes that. */
static int verify_sign(void* verify_ctx, uint16_t algo, ptls_iovec_t data, ptls_iovec_t sign)
{
  EVP_PKEY* key = (EVP_PKEY*)verify_ctx;
  if (key == NULL) return PTLS_ALERT_BAD_CERTIFICATE;
  if (data.base == NULL) { /* picotls disposing of an unused verifier (picotls.c:5564) */
    EVP_PKEY_free(key);
    return 0;
  }
  const EVP_MD* digest = NULL;
  int pss = 0;
  int ok = 0;
  switch (algo) {
  case PTLS_SIGNATURE_ED25519:
    break;
  case PTLS_SIGNATURE_ECDSA_SECP256R1_SHA256:
    digest = EVP_sha256();
    break;
  case PTLS_SIGNATURE_RSA_PSS_RSAE_SHA256:
    digest = EVP_sha256();
    pss = 1;
    break;
  default:
    EVP_PKEY_free(key);
    return PTLS_ALERT_ILLEGAL_PARAMETER;
  }
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  EVP_PKEY_CTX* pctx = NULL;
  if (md != NULL && EVP_DigestVerifyInit(md, &pctx, digest, NULL, key) == 1) {
    if (!pss || (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
                 EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1 &&
                 EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) == 1)) {
      ok = EVP_DigestVerify(md, sign.base, sign.len, data.base, data.len) == 1;
    }
  }
  EVP_MD_CTX_free(md);
  EVP_PKEY_free(key);
  return ok ? 0 : PTLS_ALERT_DECRYPT_ERROR;
}

static int verify_certificate(ptls_verify_certificate_t* self, ptls_t* tls, const char* server_name,
                              int (**verify_sign_out)(void*, uint16_t, ptls_iovec_t, ptls_iovec_t),
                              void** verify_data, ptls_iovec_t* certs, size_t num_certs)
{
  (void)self;
  (void)tls;
  (void)server_name;
  if (num_certs == 0) return PTLS_ALERT_CERTIFICATE_REQUIRED;
  const unsigned char* der = certs[0].base;
  X509* cert = d2i_X509(NULL, &der, (long)certs[0].len);
  if (cert == NULL) return PTLS_ALERT_BAD_CERTIFICATE;
  EVP_PKEY* key = X509_get_pubkey(cert);
  X509_free(cert);
  if (key == NULL) return PTLS_ALERT_BAD_CERTIFICATE;
  *verify_sign_out = verify_sign;
  *verify_data = key;
  return 0;
}

static const uint16_t verifier_algos[] = {PTLS_SIGNATURE_ED25519, PTLS_SIGNATURE_ECDSA_SECP256R1_SHA256,
                                          PTLS_SIGNATURE_RSA_PSS_RSAE_SHA256, UINT16_MAX};
static ptls_verify_certificate_t verifier = {verify_certificate, verifier_algos};

/* ------------------------------------------------------------ options */

static char qlog_option[1024];

/* picoquic's own options beside the contract's (ccd_parse_options). */
static int picoquic_option(const char* k, const char* v, ccd_options_t* o, char* err, size_t err_len)
{
  if (strcmp(k, "cc") == 0) {
    if (strcmp(v, "cubic") == 0) {
      o->reno = 0;
    } else if (strcmp(v, "reno") == 0 || strcmp(v, "newreno") == 0) {
      o->reno = 1;
    } else {
      snprintf(err, err_len, "cc=%s: picoquic's connection shim has cubic and reno (newreno)", v);
      return -1;
    }
    return 0;
  }
  if (strcmp(k, "qlog") == 0) {
    /* ccd_options_t has no field for it: kept here until ccd_conn_new copies it
     * (ccd_conn_new clears it before parsing; calls are not concurrent). */
    if (v[0] == 0 || strlen(v) >= sizeof(qlog_option)) {
      snprintf(err, err_len, "qlog=%s: a path of 1 to %zu bytes", v, sizeof(qlog_option) - 1);
      return -1;
    }
    snprintf(qlog_option, sizeof(qlog_option), "%s", v);
    return 0;
  }
  if (strcmp(k, "cwnd_limited") == 0) {
    snprintf(err, err_len, "cwnd_limited is an option of picoquic's adapter; in a connection picoquic "
             "decides itself whether it is window-limited");
    return -1;
  }
  return 1;
}

/* ------------------------------------------------------------ the qlog (qlog=PATH) */

/* picoquic-log's qlog writer is per context and per directory (picoquic_set_qlog,
 * loglib/qlog_fns.c:1042-1060): each connection opens <dir>/<its initial CID in hex>
 * .client.qlog when it starts (quicctx.c:4143, qlog_fns.c:900-927) and writes its
 * closing "]}]}" when it is deleted (qlog_fns.c:981-996, quicctx.c:4830).  The CID
 * comes from OpenSSL's generator, so the shim gives picoquic a directory of its own
 * beside PATH (PATH.picoquic-qlog) and, once picoquic_free has closed
 * the file, moves it to PATH and removes the directory.  Nothing of picoquic's text
 * is changed: times are picoquic's current_time, the simulated clock, less the
 * connection's start_time (qlog_fns.c:222), in µs. */
static int qlog_start(shim_t* s, char* err, size_t err_len)
{
  snprintf(s->qlog_dir, sizeof(s->qlog_dir), "%s.picoquic-qlog", s->qlog_path);
  if (mkdir(s->qlog_dir, 0700) != 0 && errno != EEXIST) {
    snprintf(err, err_len, "qlog: cannot make %s: %s", s->qlog_dir, strerror(errno));
    return -1;
  }
  if (picoquic_set_qlog(s->quic, s->qlog_dir) != 0) {
    snprintf(err, err_len, "qlog: picoquic_set_qlog(%s) failed", s->qlog_dir);
    return -1;
  }
  /* Every packet: without use_long_log picoquic logs packets only while
   * nb_packets_logged < PICOQUIC_LOG_PACKET_MAX_SEQUENCE (100; picoquic.h:156,
   * quicctx.c:1274-1279), as picoquicdemo's -L sets it (quicctx.c:4386-4391). */
  picoquic_set_log_level(s->quic, 1);
  return 0;
}

/* After picoquic_start_client_cnx: the file picoquic opened. */
static int qlog_opened(shim_t* s, char* err, size_t err_len)
{
  char cid[2 * PICOQUIC_CONNECTION_ID_MAX_SIZE + 1];
  if (picoquic_print_connection_id_hexa(cid, sizeof(cid), &s->cnx->initial_cnxid) != 0) {
    snprintf(err, err_len, "qlog: cannot print the initial connection ID");
    return -1;
  }
  snprintf(s->qlog_file, sizeof(s->qlog_file), "%s/%s.client.qlog", s->qlog_dir, cid);
  if (access(s->qlog_file, F_OK) != 0) {
    snprintf(err, err_len, "qlog: picoquic did not open %s", s->qlog_file);
    return -1;
  }
  return 0;
}

static void qlog_finish(shim_t* s)
{
  if (s->qlog_file[0] != 0) {
    if (rename(s->qlog_file, s->qlog_path) != 0) {
      fprintf(stderr, "picoquic shim: qlog: cannot move %s to %s: %s\n", s->qlog_file, s->qlog_path,
              strerror(errno));
      return;
    }
  }
  if (s->qlog_dir[0] != 0) {
    rmdir(s->qlog_dir); /* fails, and stays, only if something else is in it */
  }
}

/* ------------------------------------------------------------ the C ABI */

SHIM_EXPORT uint32_t ccd_conn_abi_version(void)
{
  return CCD_CONN_ABI_VERSION;
}

SHIM_EXPORT void ccd_conn_free(void* conn)
{
  shim_t* s = (shim_t*)conn;
  if (s == NULL) return;
  if (s->debug) {
    fprintf(stderr, "picoquic %s: send_mtu held at mds %llu time(s)\n", s->is_server ? "server" : "client",
            (unsigned long long)s->mtu_clamps);
  }
  if (s->quic != NULL) {
    picoquic_free(s->quic); /* frees its connections too, which closes the qlog ("]}]}") */
  }
  qlog_finish(s);
  free(s);
}

SHIM_EXPORT void* ccd_conn_new(int is_server, uint64_t now_us, uint64_t seed, const char* options,
                               char* err, size_t err_len)
{
  char why[900];
  char dummy[2];
  if (err == NULL || err_len == 0) {
    err = dummy;
    err_len = sizeof(dummy);
  }
  ccd_options_t o;
  why[0] = 0;
  qlog_option[0] = 0;
  if (ccd_parse_options(options, &o, "picoquic", OPTIONS, MIN_MDS, MAX_MDS, "RFC 9000 §14; PICOQUIC_MAX_PACKET_SIZE",
                        picoquic_option, why, sizeof(why)) != 0) {
    snprintf(err, err_len, "picoquic: %s", why);
    return NULL;
  }
  if (is_server && qlog_option[0] != 0) {
    snprintf(err, err_len, "picoquic: qlog is the client's (the judged controller's); the server writes none");
    return NULL;
  }
  if (is_server) {
    if (o.cert[0] == 0 || o.key[0] == 0) {
      snprintf(err, err_len, "picoquic: the server needs cert=PATH and key=PATH");
      return NULL;
    }
    if (!ccd_readable(o.cert) || !ccd_readable(o.key)) {
      snprintf(err, err_len, "picoquic: cannot read %s=%s", ccd_readable(o.cert) ? "key" : "cert",
               ccd_readable(o.cert) ? o.key : o.cert);
      return NULL;
    }
  }
  shim_t* s = (shim_t*)calloc(1, sizeof(shim_t));
  if (s == NULL) {
    snprintf(err, err_len, "picoquic: out of memory");
    return NULL;
  }
  s->is_server = is_server != 0;
  s->reno = o.reno;
  s->mds = o.mds;
  snprintf(s->qlog_path, sizeof(s->qlog_path), "%s", qlog_option);
  enter(s, now_us);
  s->debug = getenv("CCDIFF_PICOQUIC_DEBUG") != NULL;
  if (!s->debug) {
    debug_printf_suspend(); /* picoquic's DBG_PRINTF to stderr: off unless asked */
  }

  s->self_addr.sin_family = AF_INET;
  s->peer_addr.sin_family = AF_INET;
  struct sockaddr_in* client = s->is_server ? &s->peer_addr : &s->self_addr;
  struct sockaddr_in* server = s->is_server ? &s->self_addr : &s->peer_addr;
  client->sin_addr.s_addr = htonl(0xC0000201); /* 192.0.2.1 (RFC 5737) */
  client->sin_port = htons(50000);
  server->sin_addr.s_addr = htonl(0xC0000202); /* 192.0.2.2 */
  server->sin_port = htons(4433);

  uint64_t cid_seed = seed ^ (s->is_server ? 0x5345525645524349ull : 0x434c49454e544349ull);
  s->cid_state = splitmix64(&cid_seed);
  uint8_t reset_seed[PICOQUIC_RESET_SECRET_SIZE];
  fill_seeded(&s->cid_state, reset_seed, sizeof(reset_seed));
  /* picoquic_create's cnx_id_callback and reset_seed (quicctx.c:653, 673, 746-749). */
  s->quic = picoquic_create(8, s->is_server ? o.cert : NULL, s->is_server ? o.key : NULL, NULL,
                            s->is_server ? ALPN : NULL, shim_callback, s, seeded_cid, s, reset_seed, s->sim_time,
                            &s->sim_time, NULL, NULL, 0);
  if (s->quic == NULL) {
    snprintf(err, err_len, "picoquic: picoquic_create failed%s", s->is_server ? " (cert/key not loaded?)" : "");
    free(s);
    return NULL;
  }
  picoquic_set_random_initial(s->quic, 0);
  s->quic->use_predictable_random = 1;
  uint64_t x = seed ^ (s->is_server ? 0x5345525645522121ull : 0x434c49454e542121ull);
  picoquic_public_random_seed_64(splitmix64(&x), 1);
  picoquic_set_default_congestion_algorithm(s->quic, s->reno ? picoquic_newreno_algorithm : picoquic_cubic_algorithm);
  picoquic_set_mtu_max(s->quic, (uint32_t)(s->mds + IPV4_OVERHEAD));
  picoquic_set_default_idle_timeout(s->quic, 0);
  picoquic_set_default_handshake_timeout(s->quic, HANDSHAKE_TIMEOUT_US);
  picoquic_tp_t tp = *picoquic_get_default_tp(s->quic);
  tp.initial_max_data = FLOW_CONTROL;
  tp.initial_max_stream_data_bidi_local = FLOW_CONTROL;
  tp.initial_max_stream_data_bidi_remote = FLOW_CONTROL;
  tp.initial_max_stream_data_uni = FLOW_CONTROL;
  tp.max_idle_timeout = 0;
  tp.max_packet_size = (uint32_t)s->mds;
  if (picoquic_set_default_tp(s->quic, &tp) != 0) {
    snprintf(err, err_len, "picoquic: picoquic_set_default_tp failed");
    ccd_conn_free(s);
    return NULL;
  }
  if (!s->is_server) {
    picoquic_set_verify_certificate_callback(s->quic, &verifier, NULL);
    picoquic_enforce_client_only(s->quic, 1);
    /* The initial (client-chosen) destination CID, seeded too (else OpenSSL's:
     * quicctx.c:3798-3800); picoquic's 8 bytes. */
    picoquic_connection_id_t initial_cid = picoquic_null_connection_id;
    initial_cid.id_len = 8;
    fill_seeded(&s->cid_state, initial_cid.id, initial_cid.id_len);
    s->cnx = picoquic_create_cnx(s->quic, initial_cid, picoquic_null_connection_id,
                                 (struct sockaddr*)&s->peer_addr, s->sim_time, 0, SNI, ALPN, 1);
    if (s->cnx == NULL) {
      snprintf(err, err_len, "picoquic: picoquic_create_cnx failed");
      ccd_conn_free(s);
      return NULL;
    }
    picoquic_set_callback(s->cnx, shim_callback, s);
    if (s->qlog_path[0] != 0 && qlog_start(s, err, err_len) != 0) {
      ccd_conn_free(s);
      return NULL;
    }
    s->cnx->path[0]->send_mtu = s->mds; /* before the first Initial is prepared */
    s->mtu_set_for = s->cnx;
    int ret = picoquic_start_client_cnx(s->cnx);
    if (ret != 0) {
      snprintf(err, err_len, "picoquic: picoquic_start_client_cnx returned %d", ret);
      ccd_conn_free(s);
      return NULL;
    }
    if (s->qlog_path[0] != 0 && qlog_opened(s, err, err_len) != 0) {
      ccd_conn_free(s);
      return NULL;
    }
  }
  if (leave(s, "ccd_conn_new") != 0) {
    snprintf(err, err_len, "picoquic: %s", s->err);
    ccd_conn_free(s);
    return NULL;
  }
  return s;
}

SHIM_EXPORT int ccd_conn_recv(void* conn, const uint8_t* data, size_t len, uint64_t now_us)
{
  shim_t* s = (shim_t*)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  if (data == NULL && len > 0) {
    set_err(s, "recv: NULL data");
    return -1;
  }
  if (len > PICOQUIC_MAX_PACKET_SIZE) {
    /* picoquic's own receive loops never hand it more than their buffer; a
     * datagram this large would not come from an mds-bounded peer. */
    set_err(s, "recv: a %zu-byte datagram exceeds picoquic's %d-byte packet size", len, PICOQUIC_MAX_PACKET_SIZE);
    return -1;
  }
  /* picoquic decrypts in place: give it a copy. */
  uint8_t buffer[PICOQUIC_MAX_PACKET_SIZE];
  if (len > 0) memcpy(buffer, data, len);
  picoquic_cnx_t* first = NULL;
  (void)picoquic_incoming_packet_ex(s->quic, buffer, len, (struct sockaddr*)&s->peer_addr,
                                    (struct sockaddr*)&s->self_addr, 0, 0, &first, s->sim_time);
  return leave(s, "ccd_conn_recv");
}

SHIM_EXPORT int64_t ccd_conn_send(void* conn, uint8_t* buf, size_t cap, uint64_t now_us, uint64_t* send_at_us)
{
  shim_t* s = (shim_t*)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  if (buf == NULL || cap < PICOQUIC_ENFORCED_INITIAL_MTU) {
    set_err(s, "send: the buffer must hold at least %d bytes", PICOQUIC_ENFORCED_INITIAL_MTU);
    return -1;
  }
  size_t length = 0;
  /* A prepare call may only run timers (a loss, a PTO) and leave the connection
   * due again at the same instant: call again, as picoquic's loops do, while it
   * is still due now. */
  for (int attempt = 0; attempt < SEND_RETRIES && length == 0; attempt++) {
    struct sockaddr_storage addr_to, addr_from;
    int if_index = -1;
    picoquic_connection_id_t log_cid;
    picoquic_cnx_t* last_cnx = NULL;
    int ret = picoquic_prepare_next_packet_ex(s->quic, s->sim_time, buf, cap, &length, &addr_to, &addr_from,
                                              &if_index, &log_cid, &last_cnx, NULL);
    if (leave(s, "ccd_conn_send") != 0) return -1;
    if (ret != 0) {
      set_err(s, "picoquic_prepare_next_packet_ex returned %d (0x%x)", ret, ret);
      return -1;
    }
    if (length == 0 && picoquic_get_next_wake_time(s->quic, s->sim_time) > s->sim_time) break;
  }
  if (length > cap) {
    set_err(s, "picoquic prepared %zu bytes into a %zu-byte buffer", length, cap);
    return -1;
  }
  if (length > s->mds) {
    /* Never seen: MTU discovery is bounded by mds and send_mtu is held at it. */
    set_err(s, "picoquic prepared a %zu-byte datagram, over mds=%zu (send_mtu %zu)", length, s->mds,
            connection(s) != NULL ? connection(s)->path[0]->send_mtu : 0);
    return -1;
  }
  if (length > 0) s->bytes_sent += length;
  if (send_at_us != NULL) {
    /* picoquic paces inside prepare_packet: nothing is returned while the pacer
     * holds, and the wake time covers it; what it returns is due now. */
    *send_at_us = now_us;
  }
  return (int64_t)length;
}

SHIM_EXPORT uint64_t ccd_conn_timeout(void* conn, uint64_t now_us)
{
  shim_t* s = (shim_t*)conn;
  if (s == NULL) return CCD_CONN_NO_TIMER;
  enter(s, now_us);
  uint64_t wake = picoquic_get_next_wake_time(s->quic, s->sim_time);
  if (leave(s, "ccd_conn_timeout") != 0) return CCD_CONN_NO_TIMER;
  if (wake == UINT64_MAX) return CCD_CONN_NO_TIMER;
  if (wake <= (uint64_t)CCD_CONN_CLOCK_BASE_US) return 0;
  uint64_t at = wake - (uint64_t)CCD_CONN_CLOCK_BASE_US;
  return at >= CCD_CONN_NO_TIMER ? CCD_CONN_NO_TIMER - 1 : at;
}

SHIM_EXPORT int ccd_conn_on_timeout(void* conn, uint64_t now_us)
{
  shim_t* s = (shim_t*)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  /* picoquic runs its timers in prepare_packet (picoquic_handle_send_timers and
   * the loss/PTO checks): the harness's ccd_conn_send right after this call is
   * the timer's handler. */
  return leave(s, "ccd_conn_on_timeout");
}

SHIM_EXPORT int64_t ccd_conn_write(void* conn, uint64_t len, int fin, uint64_t now_us)
{
  shim_t* s = (shim_t*)conn;
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
  picoquic_cnx_t* cnx = s->cnx;
  if (cnx == NULL || picoquic_get_cnx_state(cnx) >= picoquic_state_disconnecting) {
    return 0;
  }
  /* picoquic pulls the bytes when it builds a packet (prepare_to_send): the
   * application keeps no copy, so all of them are accepted. */
  s->offered += len;
  if (fin) s->fin_wanted = 1;
  if (s->offered > s->provided || (s->fin_wanted && !s->fin_given)) {
    int ret = picoquic_mark_active_stream(cnx, 0, 1, s);
    if (ret != 0) {
      set_err(s, "picoquic_mark_active_stream(0) returned %d", ret);
      return -1;
    }
  }
  if (leave(s, "ccd_conn_write") != 0) return -1;
  return (int64_t)len;
}

SHIM_EXPORT int64_t ccd_conn_read(void* conn, uint64_t now_us)
{
  shim_t* s = (shim_t*)conn;
  if (s == NULL) return -1;
  enter(s, now_us);
  /* The server's application reads in picoquic's stream callback, during
   * picoquic_incoming_packet_ex: everything received in order is read. */
  if (leave(s, "ccd_conn_read") != 0) return -1;
  return (int64_t)s->bytes_read;
}

static void controller_state(picoquic_cnx_t* cnx, picoquic_path_t* path, ccd_conn_stats_t* out)
{
  if (cnx->congestion_alg == NULL || path->congestion_alg_state == NULL) return;
  uint64_t ssthresh = UINT64_MAX;
  uint64_t recovery_sequence = 0;
  int event = 0;
  switch (cnx->congestion_alg->congestion_algorithm_number) {
  case PICOQUIC_CC_ALGO_NUMBER_CUBIC: {
    const picoquic_cubic_state_t* c = (const picoquic_cubic_state_t*)path->congestion_alg_state;
    ssthresh = c->ssthresh;
    recovery_sequence = c->recovery_sequence;
    /* cubic_enter_recovery sets recovery_sequence and W_last_max (cubic.c:152-165);
     * W_last_max starts at UINT64_MAX / send_mtu (cubic.c:59). */
    event = recovery_sequence != 0 || ssthresh != UINT64_MAX;
    break;
  }
  case PICOQUIC_CC_ALGO_NUMBER_NEW_RENO: {
    const picoquic_newreno_state_t* r = (const picoquic_newreno_state_t*)path->congestion_alg_state;
    ssthresh = r->nrss.ssthresh;
    recovery_sequence = r->nrss.recovery_sequence;
    event = recovery_sequence != 0 || ssthresh != UINT64_MAX;
    break;
  }
  default:
    return;
  }
  out->ssthresh = ssthresh == UINT64_MAX ? CCD_CONN_UNKNOWN : ssthresh;
  uint64_t acked = picoquic_cc_get_ack_number(cnx, path);
  /* highest_acknowledged starts at send_sequence - 1 = UINT64_MAX (quicctx.c:3049):
   * nothing acknowledged yet, and picoquic's comparison says "not a new period". */
  out->in_recovery = (event && acked != UINT64_MAX && recovery_sequence > acked) ? 1 : 0;
}

SHIM_EXPORT int ccd_conn_stats(void* conn, ccd_conn_stats_t* out)
{
  shim_t* s = (shim_t*)conn;
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
  st.congestion_events = CCD_CONN_UNKNOWN;
  st.in_recovery = 0;
  st.stream_bytes_read = s->bytes_read;
  st.stream_fin_read = (uint64_t)s->fin_read;
  st.established = (uint64_t)s->established;
  st.closed = (uint64_t)s->closed;
  picoquic_cnx_t* cnx = connection(s);
  if (cnx != NULL && cnx->path != NULL && cnx->nb_paths > 0 && cnx->path[0] != NULL) {
    picoquic_path_t* path = cnx->path[0];
    st.cwnd = path->cwin;
    st.bytes_in_flight = path->bytes_in_transit;
    if (path->rtt_is_initialized) {
      st.smoothed_rtt_us = path->smoothed_rtt;
      st.min_rtt_us = path->rtt_min;
      st.latest_rtt_us = path->rtt_sample;
    }
    st.packets_sent = cnx->nb_packets_sent;
    st.packets_lost = cnx->nb_retransmission_total;
    controller_state(cnx, path, &st);
  }
  *out = st;
  if (real_clock_reads != s->clock_reads_at_entry) {
    set_err(s, "picoquic read the real clock during ccd_conn_stats");
    return -1;
  }
  return 0;
}

SHIM_EXPORT const char* ccd_conn_last_error(void* conn)
{
  shim_t* s = (shim_t*)conn;
  return s == NULL ? "" : s->err;
}
