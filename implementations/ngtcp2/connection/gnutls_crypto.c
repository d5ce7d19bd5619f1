/*
 * ngtcp2_crypto's GnuTLS backend, written for ccdiff (not ngtcp2's code).
 *
 * Why it exists: ngtcp2 ships its TLS glue as small "crypto helper" libraries
 * (crypto/shared.c plus one backend per TLS library: crypto/gnutls/gnutls.c,
 * crypto/boringssl/boringssl.c, ...).  The pinned source of the ngtcp2 adapter,
 * the ngtcp2-sys 0.2.0 crate, vendors ngtcp2 1.25.0's lib/, crypto/shared.c,
 * crypto/includes/ (ngtcp2_crypto_gnutls.h among them) and crypto/boringssl/ --
 * but not crypto/gnutls/ (its Cargo.toml `include` list).  This file provides the
 * backend half of the helper API (ngtcp2/ngtcp2_crypto.h and the functions
 * crypto/shared.h asks of a backend) on Debian's GnuTLS (>= 3.7.2: the QUIC
 * hooks gnutls_handshake_set_secret_function / set_read_function /
 * gnutls_handshake_write; ngtcp2's CMakeLists.txt:141 asks GnuTLS 3.7.2).
 * Everything above it -- key derivation, key installation, the callbacks ngtcp2
 * calls (client_initial, recv_crypto_data, encrypt, decrypt, hp_mask,
 * update_key, ...) -- is ngtcp2's own crypto/shared.c, unmodified.
 *
 * What it decides: nothing that reaches congestion control.  Packet protection
 * is AEAD_AES_128_GCM (the priority string of shim.c offers only it), so every
 * packet's overhead is the 16-byte tag ngtcp2 asks about through max_overhead;
 * header protection is AES-128 in one block (CBC with a zero IV is ECB for one
 * block) or ChaCha20 (never negotiated here).
 *
 * The QUIC transport parameters travel in TLS extension 0x39 (RFC 9001 §8.2),
 * registered on each session by ngtcp2_crypto_gnutls_configure_*_session: the
 * send hook encodes this endpoint's parameters straight from the connection
 * (ngtcp2_conn_encode_local_transport_params), the receive hook keeps the peer's
 * bytes and ngtcp2_crypto_set_remote_transport_params (called by shared.c when
 * the handshake keys are installed on the server and the 1-RTT read key on the
 * client) hands them to ngtcp2_conn_decode_and_set_remote_transport_params.
 *
 * The session's pointer (gnutls_session_set_ptr) must be a ccd_gnutls_ref,
 * whose first member is the ngtcp2_crypto_conn_ref.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "shared.h"
#include "gnutls_crypto.h"

#define QUIC_TP_EXTENSION 0x39 /* RFC 9001 §8.2 */
#define AES_BLOCK 16

static ngtcp2_conn *session_conn(gnutls_session_t session)
{
  ccd_gnutls_ref *ref = gnutls_session_get_ptr(session);
  return ref->conn_ref.get_conn(&ref->conn_ref);
}

/* ---------------------------------------------------------------- algorithms */

ngtcp2_crypto_aead *ngtcp2_crypto_aead_init(ngtcp2_crypto_aead *aead, void *aead_native_handle)
{
  aead->native_handle = aead_native_handle;
  aead->max_overhead = gnutls_cipher_get_tag_size((gnutls_cipher_algorithm_t)(intptr_t)aead_native_handle);
  return aead;
}

ngtcp2_crypto_aead *ngtcp2_crypto_aead_aes_128_gcm(ngtcp2_crypto_aead *aead)
{
  return ngtcp2_crypto_aead_init(aead, (void *)(intptr_t)GNUTLS_CIPHER_AES_128_GCM);
}

ngtcp2_crypto_aead *ngtcp2_crypto_aead_retry(ngtcp2_crypto_aead *aead)
{
  return ngtcp2_crypto_aead_aes_128_gcm(aead);
}

ngtcp2_crypto_md *ngtcp2_crypto_md_sha256(ngtcp2_crypto_md *md)
{
  md->native_handle = (void *)(intptr_t)GNUTLS_DIG_SHA256;
  return md;
}

ngtcp2_crypto_ctx *ngtcp2_crypto_ctx_initial(ngtcp2_crypto_ctx *ctx)
{
  ngtcp2_crypto_aead_aes_128_gcm(&ctx->aead);
  ngtcp2_crypto_md_sha256(&ctx->md);
  ctx->hp.native_handle = (void *)(intptr_t)GNUTLS_CIPHER_AES_128_CBC;
  ctx->max_encryption = 0;
  ctx->max_decryption_failure = 0;
  return ctx;
}

/* The header-protection cipher and the AEAD limits (RFC 9001 §6.6) of a TLS
 * cipher suite's AEAD. */
static int suite_of(gnutls_cipher_algorithm_t aead, gnutls_cipher_algorithm_t *hp, uint64_t *max_enc,
                    uint64_t *max_fail)
{
  switch (aead) {
  case GNUTLS_CIPHER_AES_128_GCM:
    *hp = GNUTLS_CIPHER_AES_128_CBC;
    *max_enc = NGTCP2_CRYPTO_MAX_ENCRYPTION_AES_GCM;
    *max_fail = NGTCP2_CRYPTO_MAX_DECRYPTION_FAILURE_AES_GCM;
    return 0;
  case GNUTLS_CIPHER_AES_256_GCM:
    *hp = GNUTLS_CIPHER_AES_256_CBC;
    *max_enc = NGTCP2_CRYPTO_MAX_ENCRYPTION_AES_GCM;
    *max_fail = NGTCP2_CRYPTO_MAX_DECRYPTION_FAILURE_AES_GCM;
    return 0;
  case GNUTLS_CIPHER_CHACHA20_POLY1305:
    *hp = GNUTLS_CIPHER_CHACHA20_32;
    *max_enc = NGTCP2_CRYPTO_MAX_ENCRYPTION_CHACHA20_POLY1305;
    *max_fail = NGTCP2_CRYPTO_MAX_DECRYPTION_FAILURE_CHACHA20_POLY1305;
    return 0;
  case GNUTLS_CIPHER_AES_128_CCM:
    *hp = GNUTLS_CIPHER_AES_128_CBC;
    *max_enc = NGTCP2_CRYPTO_MAX_ENCRYPTION_AES_CCM;
    *max_fail = NGTCP2_CRYPTO_MAX_DECRYPTION_FAILURE_AES_CCM;
    return 0;
  default:
    return -1;
  }
}

ngtcp2_crypto_ctx *ngtcp2_crypto_ctx_tls(ngtcp2_crypto_ctx *ctx, void *tls_native_handle)
{
  gnutls_session_t session = tls_native_handle;
  gnutls_cipher_algorithm_t aead = gnutls_cipher_get(session);
  gnutls_digest_algorithm_t prf = gnutls_prf_hash_get(session);
  gnutls_cipher_algorithm_t hp;
  uint64_t max_enc, max_fail;
  if (suite_of(aead, &hp, &max_enc, &max_fail) != 0 || prf == GNUTLS_DIG_UNKNOWN || prf == GNUTLS_DIG_NULL) {
    return NULL;
  }
  ngtcp2_crypto_aead_init(&ctx->aead, (void *)(intptr_t)aead);
  ctx->md.native_handle = (void *)(intptr_t)prf;
  ctx->hp.native_handle = (void *)(intptr_t)hp;
  ctx->max_encryption = max_enc;
  ctx->max_decryption_failure = max_fail;
  return ctx;
}

ngtcp2_crypto_ctx *ngtcp2_crypto_ctx_tls_early(ngtcp2_crypto_ctx *ctx, void *tls_native_handle)
{
  return ngtcp2_crypto_ctx_tls(ctx, tls_native_handle);
}

size_t ngtcp2_crypto_md_hashlen(const ngtcp2_crypto_md *md)
{
  return gnutls_hash_get_len((gnutls_digest_algorithm_t)(intptr_t)md->native_handle);
}

size_t ngtcp2_crypto_aead_keylen(const ngtcp2_crypto_aead *aead)
{
  return gnutls_cipher_get_key_size((gnutls_cipher_algorithm_t)(intptr_t)aead->native_handle);
}

size_t ngtcp2_crypto_aead_noncelen(const ngtcp2_crypto_aead *aead)
{
  return gnutls_cipher_get_iv_size((gnutls_cipher_algorithm_t)(intptr_t)aead->native_handle);
}

/* ---------------------------------------------------------------- contexts */

static int aead_ctx_init(ngtcp2_crypto_aead_ctx *aead_ctx, const ngtcp2_crypto_aead *aead, const uint8_t *key)
{
  gnutls_aead_cipher_hd_t hd;
  gnutls_datum_t k = {(unsigned char *)key, (unsigned int)ngtcp2_crypto_aead_keylen(aead)};
  if (gnutls_aead_cipher_init(&hd, (gnutls_cipher_algorithm_t)(intptr_t)aead->native_handle, &k) != 0) {
    return -1;
  }
  aead_ctx->native_handle = hd;
  return 0;
}

int ngtcp2_crypto_aead_ctx_encrypt_init(ngtcp2_crypto_aead_ctx *aead_ctx, const ngtcp2_crypto_aead *aead,
                                        const uint8_t *key, size_t noncelen)
{
  (void)noncelen;
  return aead_ctx_init(aead_ctx, aead, key);
}

int ngtcp2_crypto_aead_ctx_decrypt_init(ngtcp2_crypto_aead_ctx *aead_ctx, const ngtcp2_crypto_aead *aead,
                                        const uint8_t *key, size_t noncelen)
{
  (void)noncelen;
  return aead_ctx_init(aead_ctx, aead, key);
}

void ngtcp2_crypto_aead_ctx_free(ngtcp2_crypto_aead_ctx *aead_ctx)
{
  if (aead_ctx->native_handle != NULL) {
    gnutls_aead_cipher_deinit(aead_ctx->native_handle);
    aead_ctx->native_handle = NULL;
  }
}

typedef struct {
  gnutls_cipher_algorithm_t alg;
  gnutls_cipher_hd_t hd;
} hp_ctx_t;

int ngtcp2_crypto_cipher_ctx_encrypt_init(ngtcp2_crypto_cipher_ctx *cipher_ctx, const ngtcp2_crypto_cipher *cipher,
                                          const uint8_t *key)
{
  hp_ctx_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return -1;
  c->alg = (gnutls_cipher_algorithm_t)(intptr_t)cipher->native_handle;
  gnutls_datum_t k = {(unsigned char *)key, (unsigned int)gnutls_cipher_get_key_size(c->alg)};
  uint8_t zero_iv[16] = {0};
  gnutls_datum_t iv = {zero_iv, (unsigned int)gnutls_cipher_get_iv_size(c->alg)};
  if (gnutls_cipher_init(&c->hd, c->alg, &k, &iv) != 0) {
    free(c);
    return -1;
  }
  cipher_ctx->native_handle = c;
  return 0;
}

void ngtcp2_crypto_cipher_ctx_free(ngtcp2_crypto_cipher_ctx *cipher_ctx)
{
  hp_ctx_t *c = cipher_ctx->native_handle;
  if (c != NULL) {
    gnutls_cipher_deinit(c->hd);
    free(c);
    cipher_ctx->native_handle = NULL;
  }
}

/* ---------------------------------------------------------------- primitives */

int ngtcp2_crypto_hkdf_extract(uint8_t *dest, const ngtcp2_crypto_md *md, const uint8_t *secret, size_t secretlen,
                               const uint8_t *salt, size_t saltlen)
{
  gnutls_datum_t s = {(unsigned char *)secret, (unsigned int)secretlen};
  gnutls_datum_t k = {(unsigned char *)salt, (unsigned int)saltlen};
  /* gnutls_mac_algorithm_t and gnutls_digest_algorithm_t share their values for
   * the SHA-2 family (gnutls.h: GNUTLS_DIG_SHA256 = GNUTLS_MAC_SHA256, ...). */
  return gnutls_hkdf_extract((gnutls_mac_algorithm_t)(intptr_t)md->native_handle, &s, &k, dest) == 0 ? 0 : -1;
}

int ngtcp2_crypto_hkdf_expand(uint8_t *dest, size_t destlen, const ngtcp2_crypto_md *md, const uint8_t *secret,
                              size_t secretlen, const uint8_t *info, size_t infolen)
{
  gnutls_datum_t s = {(unsigned char *)secret, (unsigned int)secretlen};
  gnutls_datum_t i = {(unsigned char *)info, (unsigned int)infolen};
  return gnutls_hkdf_expand((gnutls_mac_algorithm_t)(intptr_t)md->native_handle, &s, &i, dest, destlen) == 0 ? 0
                                                                                                             : -1;
}

int ngtcp2_crypto_hkdf(uint8_t *dest, size_t destlen, const ngtcp2_crypto_md *md, const uint8_t *secret,
                       size_t secretlen, const uint8_t *salt, size_t saltlen, const uint8_t *info, size_t infolen)
{
  uint8_t prk[64];
  size_t prklen = ngtcp2_crypto_md_hashlen(md);
  if (prklen > sizeof(prk)) return -1;
  if (ngtcp2_crypto_hkdf_extract(prk, md, secret, secretlen, salt, saltlen) != 0) return -1;
  int rv = ngtcp2_crypto_hkdf_expand(dest, destlen, md, prk, prklen, info, infolen);
  memset(prk, 0, sizeof(prk));
  return rv;
}

int ngtcp2_crypto_encrypt(uint8_t *dest, const ngtcp2_crypto_aead *aead, const ngtcp2_crypto_aead_ctx *aead_ctx,
                          const uint8_t *plaintext, size_t plaintextlen, const uint8_t *nonce, size_t noncelen,
                          const uint8_t *aad, size_t aadlen)
{
  size_t tag = aead->max_overhead;
  size_t outlen = plaintextlen + tag;
  return gnutls_aead_cipher_encrypt(aead_ctx->native_handle, nonce, noncelen, aad, aadlen, tag, plaintext,
                                    plaintextlen, dest, &outlen) == 0
           ? 0
           : -1;
}

int ngtcp2_crypto_decrypt(uint8_t *dest, const ngtcp2_crypto_aead *aead, const ngtcp2_crypto_aead_ctx *aead_ctx,
                          const uint8_t *ciphertext, size_t ciphertextlen, const uint8_t *nonce, size_t noncelen,
                          const uint8_t *aad, size_t aadlen)
{
  size_t tag = aead->max_overhead;
  if (ciphertextlen < tag) return -1;
  size_t outlen = ciphertextlen - tag;
  return gnutls_aead_cipher_decrypt(aead_ctx->native_handle, nonce, noncelen, aad, aadlen, tag, ciphertext,
                                    ciphertextlen, dest, &outlen) == 0
           ? 0
           : -1;
}

/* RFC 9001 §5.4.3 (AES: the mask is AES-ECB(hp_key, sample)) and §5.4.4
 * (ChaCha20: counter = sample[0..3], nonce = sample[4..15], mask = the
 * keystream XOR zeros). */
int ngtcp2_crypto_hp_mask(uint8_t *dest, const ngtcp2_crypto_cipher *hp, const ngtcp2_crypto_cipher_ctx *hp_ctx,
                          const uint8_t *sample)
{
  (void)hp;
  hp_ctx_t *c = hp_ctx->native_handle;
  uint8_t out[AES_BLOCK];
  switch (c->alg) {
  case GNUTLS_CIPHER_AES_128_CBC:
  case GNUTLS_CIPHER_AES_256_CBC: {
    uint8_t zero_iv[AES_BLOCK] = {0};
    gnutls_cipher_set_iv(c->hd, zero_iv, sizeof(zero_iv)); /* one CBC block, zero IV: ECB */
    if (gnutls_cipher_encrypt2(c->hd, sample, AES_BLOCK, out, sizeof(out)) != 0) return -1;
    break;
  }
  case GNUTLS_CIPHER_CHACHA20_32: {
    static const uint8_t zeros[AES_BLOCK] = {0};
    gnutls_cipher_set_iv(c->hd, (void *)sample, 16); /* 32-bit counter || 96-bit nonce */
    if (gnutls_cipher_encrypt2(c->hd, zeros, sizeof(zeros), out, sizeof(out)) != 0) return -1;
    break;
  }
  default:
    return -1;
  }
  memcpy(dest, out, NGTCP2_HP_MASKLEN);
  return 0;
}

/* ---------------------------------------------------------------- TLS glue */

ngtcp2_encryption_level ngtcp2_crypto_gnutls_from_gnutls_record_encryption_level(
  gnutls_record_encryption_level_t gtls_level)
{
  switch (gtls_level) {
  case GNUTLS_ENCRYPTION_LEVEL_INITIAL:
    return NGTCP2_ENCRYPTION_LEVEL_INITIAL;
  case GNUTLS_ENCRYPTION_LEVEL_EARLY:
    return NGTCP2_ENCRYPTION_LEVEL_0RTT;
  case GNUTLS_ENCRYPTION_LEVEL_HANDSHAKE:
    return NGTCP2_ENCRYPTION_LEVEL_HANDSHAKE;
  case GNUTLS_ENCRYPTION_LEVEL_APPLICATION:
  default:
    return NGTCP2_ENCRYPTION_LEVEL_1RTT;
  }
}

gnutls_record_encryption_level_t ngtcp2_crypto_gnutls_from_ngtcp2_encryption_level(
  ngtcp2_encryption_level encryption_level)
{
  switch (encryption_level) {
  case NGTCP2_ENCRYPTION_LEVEL_INITIAL:
    return GNUTLS_ENCRYPTION_LEVEL_INITIAL;
  case NGTCP2_ENCRYPTION_LEVEL_0RTT:
    return GNUTLS_ENCRYPTION_LEVEL_EARLY;
  case NGTCP2_ENCRYPTION_LEVEL_HANDSHAKE:
    return GNUTLS_ENCRYPTION_LEVEL_HANDSHAKE;
  case NGTCP2_ENCRYPTION_LEVEL_1RTT:
  default:
    return GNUTLS_ENCRYPTION_LEVEL_APPLICATION;
  }
}

int ngtcp2_crypto_read_write_crypto_data(ngtcp2_conn *conn, ngtcp2_encryption_level encryption_level,
                                         const uint8_t *data, size_t datalen)
{
  gnutls_session_t session = ngtcp2_conn_get_tls_native_handle2(conn);
  if (datalen > 0 &&
      gnutls_handshake_write(session, ngtcp2_crypto_gnutls_from_ngtcp2_encryption_level(encryption_level), data,
                             datalen) != 0) {
    return -1;
  }
  if (!ngtcp2_conn_get_handshake_completed2(conn)) {
    int rv = gnutls_handshake(session);
    if (rv < 0) {
      if (!gnutls_error_is_fatal(rv)) return 0; /* wants more data */
      ccd_gnutls_ref *ref = gnutls_session_get_ptr(session);
      ref->last_gnutls_error = rv;
      gnutls_alert_send_appropriate(session, rv);
      return -1;
    }
    ngtcp2_conn_tls_handshake_completed(conn);
  }
  return 0;
}

int ngtcp2_crypto_set_remote_transport_params(ngtcp2_conn *conn, void *tls)
{
  ccd_gnutls_ref *ref = gnutls_session_get_ptr((gnutls_session_t)tls);
  if (!ref->peer_tp_received) {
    ngtcp2_conn_set_tls_error(conn, NGTCP2_ERR_REQUIRED_TRANSPORT_PARAM);
    return -1;
  }
  int rv = ngtcp2_conn_decode_and_set_remote_transport_params(conn, ref->peer_tp, ref->peer_tp_len);
  if (rv != 0) {
    ngtcp2_conn_set_tls_error(conn, rv);
    return -1;
  }
  return 0;
}

int ngtcp2_crypto_set_local_transport_params(void *tls, const uint8_t *buf, size_t len)
{
  /* The extension's send hook encodes the parameters from the connection when
   * GnuTLS writes the ClientHello or EncryptedExtensions. */
  (void)tls;
  (void)buf;
  (void)len;
  return 0;
}

int ngtcp2_crypto_get_path_challenge_data_cb(ngtcp2_conn *conn, uint8_t *data, void *user_data)
{
  (void)conn;
  (void)user_data;
  return gnutls_rnd(GNUTLS_RND_NONCE, data, NGTCP2_PATH_CHALLENGE_DATALEN) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

int ngtcp2_crypto_get_path_challenge_data2_cb(ngtcp2_conn *conn, ngtcp2_path_challenge_data *data, void *user_data)
{
  return ngtcp2_crypto_get_path_challenge_data_cb(conn, data->data, user_data);
}

int ngtcp2_crypto_random(uint8_t *data, size_t datalen)
{
  return gnutls_rnd(GNUTLS_RND_RANDOM, data, datalen) == 0 ? 0 : -1;
}

static int secret_hook(gnutls_session_t session, gnutls_record_encryption_level_t gtls_level,
                       const void *secret_read, const void *secret_write, size_t secret_size)
{
  ngtcp2_conn *conn = session_conn(session);
  ngtcp2_encryption_level level = ngtcp2_crypto_gnutls_from_gnutls_record_encryption_level(gtls_level);
  if (secret_read != NULL &&
      ngtcp2_crypto_derive_and_install_rx_key(conn, NULL, NULL, NULL, level, secret_read, secret_size) != 0) {
    return -1;
  }
  if (secret_write != NULL &&
      ngtcp2_crypto_derive_and_install_tx_key(conn, NULL, NULL, NULL, level, secret_write, secret_size) != 0) {
    return -1;
  }
  return 0;
}

static int handshake_message_hook(gnutls_session_t session, gnutls_record_encryption_level_t gtls_level,
                                  gnutls_handshake_description_t htype, const void *data, size_t datalen)
{
  if (htype == GNUTLS_HANDSHAKE_CHANGE_CIPHER_SPEC) return 0; /* not in QUIC (RFC 9001 §8.4) */
  ngtcp2_conn *conn = session_conn(session);
  int rv = ngtcp2_conn_submit_crypto_data(conn, ngtcp2_crypto_gnutls_from_gnutls_record_encryption_level(gtls_level),
                                          data, datalen);
  if (rv != 0) {
    ngtcp2_conn_set_tls_error(conn, rv);
    return -1;
  }
  return 0;
}

static int alert_hook(gnutls_session_t session, gnutls_record_encryption_level_t gtls_level,
                      gnutls_alert_level_t alert_level, gnutls_alert_description_t alert_desc)
{
  (void)gtls_level;
  (void)alert_level;
  ngtcp2_conn_set_tls_alert(session_conn(session), (uint8_t)alert_desc);
  return 0;
}

static int tp_recv(gnutls_session_t session, const unsigned char *data, size_t len)
{
  ccd_gnutls_ref *ref = gnutls_session_get_ptr(session);
  if (len > sizeof(ref->peer_tp)) return GNUTLS_E_RECORD_OVERFLOW;
  memcpy(ref->peer_tp, data, len);
  ref->peer_tp_len = len;
  ref->peer_tp_received = 1;
  return 0;
}

static int tp_send(gnutls_session_t session, gnutls_buffer_t extdata)
{
  uint8_t buf[512];
  ngtcp2_ssize n = ngtcp2_conn_encode_local_transport_params(session_conn(session), buf, sizeof(buf));
  if (n < 0) return GNUTLS_E_INTERNAL_ERROR;
  if (gnutls_buffer_append_data(extdata, buf, (size_t)n) != 0) return GNUTLS_E_MEMORY_ERROR;
  return (int)n;
}

static int configure_session(gnutls_session_t session)
{
  gnutls_handshake_set_secret_function(session, secret_hook);
  gnutls_handshake_set_read_function(session, handshake_message_hook);
  gnutls_alert_set_read_function(session, alert_hook);
  return gnutls_session_ext_register(session, "QUIC Transport Parameters", QUIC_TP_EXTENSION, GNUTLS_EXT_TLS,
                                     tp_recv, tp_send, NULL, NULL, NULL,
                                     GNUTLS_EXT_FLAG_TLS | GNUTLS_EXT_FLAG_CLIENT_HELLO | GNUTLS_EXT_FLAG_EE) == 0
           ? 0
           : -1;
}

int ngtcp2_crypto_gnutls_configure_server_session(gnutls_session_t session)
{
  return configure_session(session);
}

int ngtcp2_crypto_gnutls_configure_client_session(gnutls_session_t session)
{
  return configure_session(session);
}
