// ccdiff connection mode: quiche's clock and random source, set by the shim.
// Added to the crate at build time by patches/clock.py (ccdiff, not upstream).
//
// Every `Instant::now()` (and the one `Instant::elapsed()`) of quiche's src/
// is rewritten to `crate::ccdiff_clock::now()`, which returns the virtual
// time the shim set before its call into quiche:
//     BASE + CCD_CONN_CLOCK_BASE_US + virtual_us
// with BASE one real Instant taken once per process.  Quiche's own random
// draws (rand.rs: packet-number skips, path challenges, the client's initial
// DCID) come from a per-endpoint xorshift stream the shim seeds from the
// run's seed; BoringSSL's TLS randomness stays its own (it changes bytes,
// never sizes or times).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;
use std::time::Instant;

/// The contract's offset: stack time = CCD_CONN_CLOCK_BASE_US + virtual µs.
pub const CLOCK_BASE_US: u64 = 259_201_234_567;

static BASE: OnceLock<Instant> = OnceLock::new();

thread_local! {
    static NOW_US: Cell<u64> = const { Cell::new(0) };
    static RNG: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

fn base() -> Instant {
    // The only real read of the clock left in the crate.
    *BASE.get_or_init(Instant::now)
}

/// Sets the virtual time (µs since the run started) quiche sees next.
pub fn set_now_us(us: u64) {
    NOW_US.with(|c| c.set(us));
}

/// The virtual time quiche sees, in µs since the run started.
pub fn now_us() -> u64 {
    NOW_US.with(|c| c.get())
}

/// The Instant of a virtual time.
pub fn instant_of(us: u64) -> Instant {
    base() + Duration::from_micros(CLOCK_BASE_US + us)
}

/// The virtual time of an Instant (µs, rounded up; 0 before the run).
pub fn us_of(t: Instant) -> u64 {
    let d = t.saturating_duration_since(base());
    let us = d.as_nanos().div_ceil(1000) as u64;
    us.saturating_sub(CLOCK_BASE_US)
}

/// quiche's `Instant::now()`: the virtual time the shim set.
pub fn now() -> Instant {
    instant_of(now_us())
}

/// The state of the random stream (the shim swaps it per endpoint).
pub fn rng_state() -> u64 {
    RNG.with(|c| c.get())
}

/// Sets the state of the random stream (never 0).
pub fn set_rng_state(s: u64) {
    RNG.with(|c| c.set(if s == 0 { 0x9e37_79b9_7f4a_7c15 } else { s }));
}

/// quiche's rand::rand_bytes: xorshift64* from the shim's seed.
pub fn rand_bytes(buf: &mut [u8]) {
    RNG.with(|c| {
        let mut x = c.get();
        for chunk in buf.chunks_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        c.set(x);
    });
}

extern "C" {
    fn SSL_CTX_set_verify_algorithm_prefs(
        ctx: *mut std::ffi::c_void, prefs: *const u16, num_prefs: usize,
    ) -> std::ffi::c_int;
}

/// Lets the endpoint verify Ed25519 signatures (the contract's test
/// certificate; fixed-size signatures keep a run's datagram sizes a function
/// of its seed).  BoringSSL's client leaves Ed25519 out of its
/// signature_algorithms by default and quiche has no setting for it.
pub fn verify_ed25519(c: &mut crate::Config) -> bool {
    // ed25519, then BoringSSL's defaults (ecdsa_secp256r1_sha256,
    // rsa_pss_rsae_sha256, rsa_pkcs1_sha256, ecdsa_secp384r1_sha384,
    // rsa_pss_rsae_sha384, rsa_pkcs1_sha384, rsa_pss_rsae_sha512, rsa_pkcs1_sha512).
    const PREFS: [u16; 9] =
        [0x0807, 0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601];
    let ctx = c.tls_ctx.ccdiff_ssl_ctx();
    // SAFETY: ctx is the Config's live SSL_CTX; PREFS outlives the call (copied).
    unsafe { SSL_CTX_set_verify_algorithm_prefs(ctx, PREFS.as_ptr(), PREFS.len()) == 1 }
}

/// Bytes in flight on the active path: RecoveryOps::bytes_in_flight(), which
/// quiche's public API (path_stats, stats) does not give.  Read-only.
pub fn bytes_in_flight<F: crate::BufFactory>(c: &crate::Connection<F>) -> Option<usize> {
    use crate::recovery::RecoveryOps;
    c.paths.get_active().ok().map(|p| p.recovery.bytes_in_flight())
}
