/* ccdiff's GnuTLS backend for ngtcp2_crypto (gnutls_crypto.c): the object a
 * GnuTLS session's pointer (gnutls_session_set_ptr) must point to. */
#ifndef CCDIFF_NGTCP2_GNUTLS_CRYPTO_H
#define CCDIFF_NGTCP2_GNUTLS_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#include <ngtcp2/ngtcp2_crypto.h>

typedef struct {
  ngtcp2_crypto_conn_ref conn_ref; /* first: ngtcp2's helpers may cast the pointer */
  uint8_t peer_tp[1024];           /* the peer's quic_transport_parameters extension */
  size_t peer_tp_len;
  int peer_tp_received;
  int last_gnutls_error; /* the last fatal gnutls_handshake error, for messages */
} ccd_gnutls_ref;

#endif
