/*
 * The shim's window onto ngtcp2's private connection state (lib/ngtcp2_conn.h),
 * in its own file: lib/ngtcp2_crypto.h and the public crypto/includes/ngtcp2/
 * ngtcp2_crypto.h share their include guard (NGTCP2_CRYPTO_H), so one file
 * cannot include both ngtcp2_conn.h and the crypto helper's API.
 * Read-only, except ccd_ng_cc(), which lets shim.c wrap the controller's
 * callbacks (forwarding wrappers; the controller itself is untouched).
 */
#include "ngtcp2_conn.h"
#include "private.h"

ngtcp2_cc *ccd_ng_cc(ngtcp2_conn *conn)
{
  return &conn->cc;
}

ngtcp2_conn *ccd_ng_conn_of_cc(ngtcp2_cc *cc)
{
  return (ngtcp2_conn *)((char *)cc - offsetof(ngtcp2_conn, cc));
}

void *ccd_ng_user_data(ngtcp2_conn *conn)
{
  return conn->user_data;
}

ngtcp2_tstamp ccd_ng_first_rtt_sample_ts(ngtcp2_conn *conn)
{
  return conn->cstat.first_rtt_sample_ts;
}

ngtcp2_tstamp ccd_ng_congestion_recovery_start_ts(ngtcp2_conn *conn)
{
  return conn->cstat.congestion_recovery_start_ts;
}

uint64_t ccd_ng_rst_app_limited(ngtcp2_conn *conn)
{
  return conn->rst.app_limited;
}
