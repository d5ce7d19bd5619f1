/* private.c: accessors of ngtcp2's private connection state. */
#ifndef CCDIFF_NGTCP2_PRIVATE_H
#define CCDIFF_NGTCP2_PRIVATE_H

#include <ngtcp2/ngtcp2.h>

#include "ngtcp2_cc.h"        /* ngtcp2_cc, its callback types, ngtcp2_cc_ack, ngtcp2_cc_pkt */
#include "ngtcp2_conn_stat.h" /* ngtcp2_conn_stat */

ngtcp2_cc *ccd_ng_cc(ngtcp2_conn *conn);
ngtcp2_conn *ccd_ng_conn_of_cc(ngtcp2_cc *cc);
void *ccd_ng_user_data(ngtcp2_conn *conn);
ngtcp2_tstamp ccd_ng_first_rtt_sample_ts(ngtcp2_conn *conn);
ngtcp2_tstamp ccd_ng_congestion_recovery_start_ts(ngtcp2_conn *conn);
uint64_t ccd_ng_rst_app_limited(ngtcp2_conn *conn);

#endif
