//! ccdiff connection shim for s2n-quic: s2n-quic's own client and server (the `s2n_quic`
//! crate's public Client / Server and stream API) behind
//! implementations/include/ccdiff_connection.h (ABI 1; docs/connection-mode.md).
//!
//! How the endpoint is driven.  An s2n-quic endpoint is started by its I/O provider
//! (`s2n_quic::provider::io::Provider::start(endpoint)`, s2n-quic src/provider/io.rs):
//! the stock providers (tokio, testing) spawn `s2n_quic_core::io::event_loop::EventLoop`
//! (s2n-quic-core src/io/event_loop.rs) on an executor.  This shim's provider (`ShimIo`)
//! spawns nothing: it keeps the `s2n_quic_core::endpoint::Endpoint` it is handed (behind the
//! object-safe `Driven`), and every contract call does by hand what one turn of that event loop
//! does, on the shim's own queues and clock:
//!   recv        -> Endpoint::receive(rx queue holding the one datagram, clock)
//!   send        -> Endpoint::transmit(tx queue with room for exactly one datagram, clock)
//!   on_timeout  -> Endpoint::transmit(tx queue with no room, clock): transmit runs the
//!                  endpoint's on_timeout(now) first and returns before writing anything
//!                  (s2n-quic-transport src/endpoint/mod.rs:124-134)
//!   timeout     -> Endpoint::timeout()
//! and after each, the application side is pumped: the client's ConnectionAttempt, opening
//! its bidirectional stream, the server's accept and stream accept, all polled with a no-op
//! waker, and Endpoint::poll_wakeups (which also takes the client's connect request,
//! mod.rs:181-273) until nothing moves.  Nothing of s2n-quic is patched.
//!
//! Time.  The clock handed to the endpoint returns Timestamp(CCD_CONN_CLOCK_BASE_US + now)
//! (s2n's Timestamp is microseconds, core src/time/timestamp.rs).  Read elsewhere: the
//! default address-token provider reads s2n_quic_platform::time::now() (s2n-quic
//! src/provider/address_token/default.rs:105, 210) only when it signs or checks a Retry
//! token, which this one-connection setup never does; rustls's time provider is set to the
//! virtual clock.
//!
//! Randomness, from the run's seed and the role (splitmix64 streams): s2n's random provider
//! (`provider::random`, feature unstable-provider-random: packet-number skips, initial CIDs,
//! address-token keys, PTO jitter ...), the connection-ID format (16-byte IDs, as s2n's
//! default, provider/connection_id.rs), stateless reset tokens, rustls's SecureRandom
//! (client/server randoms, ticket nonces) and the X25519 key share (a SupportedKxGroup that
//! takes its private key from the seeded stream; aws-lc-rs does the agreement).  Ed25519
//! signatures are deterministic.  So two runs with one seed give byte-identical datagrams.
//!
//! TLS: rustls 0.23 (s2n-quic-rustls, aws-lc-rs), TLS 1.3 with s2n-quic-rustls's cipher
//! suites, ALPN "ccdiff", the server's cert/key; the client trusts the presented
//! certificate but checks the handshake signature.
//!
//! qlog=PATH (the client's; docs/connection-mode.md, docs/qlog-import.md): s2n-quic has no qlog
//! writer, so the shim writes one (qlog 0.3, JSON-SEQ) from s2n's own event subscriber and the
//! forwarding controller's calls: packet_sent with frames and raw.length, packet_received with its
//! ACK frame (ranges, the ACK delay s2n's RTT estimator took off, ECN counts), packet_lost,
//! persistent congestion, metrics_updated with the controller's window, bytes in flight, ssthresh
//! and RTTs, key discards, the peer's transport parameters, and two records of the shim's own
//! (`written_by`): recovery:parameters_set (the datagram size) and one `ccdiff:app_limited` after
//! each packet in flight (the app_limited s2n handed its controller).  Times are the virtual
//! clock's; nothing the endpoints do changes (the writer only observes): the same seed gives the
//! same datagrams with or without it, and the same file.  The `qlog` section below lists each
//! record with its source.
//!
//! MTU: base = initial = max MTU = mds + 28 (IPv4 + UDP headers): the MTU controller starts
//! in SearchComplete (core src/path/mtu.rs:533-580), no probing, full datagrams are mds.
//! Limits: data windows u32::MAX (4 GiB, s2n's maximum), idle timeout 3600 s, handshake
//! duration 600 s.  Congestion control: s2n's CubicCongestionController (its default),
//! wrapped (feature unstable-congestion-controller) by a forwarding controller that keeps
//! a clone of its state after each call for ccd_conn_stats.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::ffi::{c_char, c_void, CStr, CString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use s2n_quic::provider::congestion_controller::{
    CongestionController, PathInfo, Publisher, RandomGenerator, RttEstimator, Timestamp,
};
use s2n_quic::provider::event::{events, ConnectionInfo, ConnectionMeta, Subscriber};
use s2n_quic::stream::BidirectionalStream;
use s2n_quic_core::endpoint::{CloseError, Endpoint};
use s2n_quic_core::inet::{datagram, ExplicitCongestionNotification, SocketAddress};
use s2n_quic_core::io::{rx, tx};
use s2n_quic_core::path::{mtu, LocalAddress, RemoteAddress, Tuple};
use s2n_quic_core::recovery::CubicCongestionController;
use s2n_quic_core::time::Clock;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

const CCD_CONN_ABI_VERSION: u32 = 1;
const CCD_CONN_CLOCK_BASE_US: u64 = 259_201_234_567;
const UNKNOWN: u64 = u64::MAX;
const NO_TIMER: u64 = u64::MAX;

const ALPN: &[u8] = b"ccdiff";
const SERVER_NAME: &str = "ccdiff.test";
const CLIENT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 50000);
const SERVER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 4433);
const OPTIONS: &str = "mds, cert, key, cc=cubic, qlog=PATH";
/// IPv4 (20) + UDP (8) header bytes: s2n's MTU counts them (core src/path/mtu.rs:170-181).
const IPV4_UDP_HEADERS: u64 = 28;
const MIN_MDS: u64 = 1200;

static ZEROS: [u8; 1 << 16] = [0; 1 << 16];

#[repr(C)]
pub struct CcdConnStats {
    cwnd: u64,
    bytes_in_flight: u64,
    ssthresh: u64,
    smoothed_rtt_us: u64,
    min_rtt_us: u64,
    latest_rtt_us: u64,
    packets_sent: u64,
    packets_lost: u64,
    bytes_sent: u64,
    congestion_events: u64,
    in_recovery: u64,
    stream_bytes_read: u64,
    stream_fin_read: u64,
    established: u64,
    closed: u64,
}

// ---------------------------------------------------------------- panics

thread_local! {
    static PANIC_MSG: RefCell<Option<String>> = const { RefCell::new(None) };
}
static HOOK: Once = Once::new();

fn install_panic_hook() {
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let msg = info.to_string().replace('\n', " ");
            PANIC_MSG.with(|m| *m.borrow_mut() = Some(msg));
        }));
    });
}

fn panic_message() -> String {
    let msg = PANIC_MSG.with(|m| m.borrow_mut().take()).unwrap_or_else(|| "unknown panic".into());
    format!("panic in s2n-quic: {msg}")
}

// ---------------------------------------------------------------- random

/// splitmix64: one stream per use, from the seed, the role and a salt.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn new(seed: u64, server: bool, salt: u64) -> Self {
        let mut s = SplitMix(seed ^ (if server { 0x5e41_7e40_0000_0000 } else { 0xc1_1e47 }));
        s.0 ^= salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        s.next();
        s
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn fill(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// s2n's random provider (provider::random, feature unstable-provider-random).
struct SeededRandom {
    public: SplitMix,
    private: SplitMix,
}

impl s2n_quic_core::random::Generator for SeededRandom {
    fn public_random_fill(&mut self, dest: &mut [u8]) {
        self.public.fill(dest)
    }
    fn private_random_fill(&mut self, dest: &mut [u8]) {
        self.private.fill(dest)
    }
}

impl s2n_quic::provider::random::Provider for SeededRandom {
    type Generator = Self;
    type Error = Infallible;
    fn start(self) -> Result<Self, Infallible> {
        Ok(self)
    }
}

/// Connection IDs: 16 bytes as s2n's default format (provider/connection_id.rs:51-66), seeded.
struct SeededCids {
    rng: SplitMix,
}

impl s2n_quic::provider::connection_id::Generator for SeededCids {
    fn generate(
        &mut self,
        _info: &s2n_quic::provider::connection_id::ConnectionInfo,
    ) -> s2n_quic::provider::connection_id::LocalId {
        let mut id = [0u8; 16];
        self.rng.fill(&mut id);
        (&id[..]).try_into().expect("16-byte connection id")
    }
    fn rotate_handshake_connection_id(&self) -> bool {
        true
    }
}

impl s2n_quic::provider::connection_id::Validator for SeededCids {
    fn validate(
        &self,
        _info: &s2n_quic::provider::connection_id::ConnectionInfo,
        buffer: &[u8],
    ) -> Option<usize> {
        (buffer.len() >= 16).then_some(16)
    }
}

/// Stateless reset tokens: random per call, as s2n's default (provider/stateless_reset_token.rs).
struct SeededResetTokens {
    rng: SplitMix,
}

impl s2n_quic::provider::stateless_reset_token::Generator for SeededResetTokens {
    fn generate(&mut self, _local_connection_id: &[u8]) -> s2n_quic_core::stateless_reset::token::Token {
        let mut t = [0u8; 16];
        self.rng.fill(&mut t);
        t.into()
    }
}

impl s2n_quic::provider::stateless_reset_token::Provider for SeededResetTokens {
    type Generator = Self;
    type Error = Infallible;
    fn start(self) -> Result<Self, Infallible> {
        Ok(self)
    }
}

/// rustls's randomness (client/server random, ticket nonces and IDs).
#[derive(Debug)]
struct TlsRandom(Mutex<SplitMix>);

impl rustls::crypto::SecureRandom for TlsRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), rustls::crypto::GetRandomFailed> {
        self.0.lock().unwrap().fill(buf);
        Ok(())
    }
}

/// X25519 with the private key from the seeded stream; the agreement is aws-lc-rs's.
#[derive(Debug)]
struct SeededX25519(Mutex<SplitMix>);

struct ActiveX25519 {
    key: aws_lc_rs::agreement::PrivateKey,
    public: Vec<u8>,
}

impl rustls::crypto::SupportedKxGroup for SeededX25519 {
    fn start(&self) -> Result<Box<dyn rustls::crypto::ActiveKeyExchange>, rustls::Error> {
        let mut secret = [0u8; 32];
        self.0.lock().unwrap().fill(&mut secret);
        let key = aws_lc_rs::agreement::PrivateKey::from_private_key(&aws_lc_rs::agreement::X25519, &secret)
            .map_err(|_| rustls::Error::General("x25519 key rejected".into()))?;
        let public = key
            .compute_public_key()
            .map_err(|_| rustls::Error::General("x25519 public key".into()))?
            .as_ref()
            .to_vec();
        Ok(Box::new(ActiveX25519 { key, public }))
    }
    fn name(&self) -> rustls::NamedGroup {
        rustls::NamedGroup::X25519
    }
}

impl rustls::crypto::ActiveKeyExchange for ActiveX25519 {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<rustls::crypto::SharedSecret, rustls::Error> {
        let peer = aws_lc_rs::agreement::UnparsedPublicKey::new(&aws_lc_rs::agreement::X25519, peer_pub_key);
        aws_lc_rs::agreement::agree(&self.key, peer, rustls::Error::from(rustls::PeerMisbehaved::InvalidKeyShare), |s| {
            Ok(rustls::crypto::SharedSecret::from(s))
        })
    }
    fn pub_key(&self) -> &[u8] {
        &self.public
    }
    fn group(&self) -> rustls::NamedGroup {
        rustls::NamedGroup::X25519
    }
}

// ---------------------------------------------------------------- time

fn stamp(now_us: u64) -> s2n_quic_core::time::Timestamp {
    // Safety (s2n's own words: "should only be used by time sources"): this is the time source.
    unsafe { s2n_quic_core::time::Timestamp::from_duration(Duration::from_micros(CCD_CONN_CLOCK_BASE_US + now_us)) }
}

fn unstamp(t: s2n_quic_core::time::Timestamp) -> u64 {
    let us = unsafe { t.as_duration() }.as_micros() as u64;
    us.saturating_sub(CCD_CONN_CLOCK_BASE_US)
}

/// The virtual clock: the time the current call was made at.
#[derive(Debug, Default)]
struct VClock(AtomicU64);

impl VClock {
    fn set(&self, now_us: u64) {
        self.0.store(now_us, Ordering::Relaxed)
    }
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Clock for VClock {
    fn get_time(&self) -> s2n_quic_core::time::Timestamp {
        stamp(self.now_us())
    }
}

#[derive(Debug)]
struct TlsTime(Arc<VClock>);

impl rustls::time_provider::TimeProvider for TlsTime {
    fn current_time(&self) -> Option<UnixTime> {
        Some(UnixTime::since_unix_epoch(Duration::from_micros(CCD_CONN_CLOCK_BASE_US + self.0.now_us())))
    }
}

// ---------------------------------------------------------------- observations

#[derive(Default)]
struct Obs {
    cc: Option<CubicCongestionController>,
    congestion_events: u64,
    rtt: Option<(Duration, Duration, Duration)>, // smoothed, min, latest
    packets_sent: u64,
    packets_lost: u64,
    established: bool,
    closed: bool,
    /// qlog=PATH (the client only): the writer, fed by the event subscriber and the
    /// controller wrapper (module `qlog` below).
    qlog: Option<QlogW>,
}

type SharedObs = Arc<Mutex<Obs>>;

/// The value after `name: ` in a derived Debug string (balanced brackets).
fn debug_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}: ");
    let start = text.find(&key)? + key.len();
    let rest = &text[start..];
    let mut depth = 0i32;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => {
                if depth == 0 {
                    return Some(&rest[..i]);
                }
                depth -= 1;
            }
            ',' if depth == 0 => return Some(&rest[..i]),
            _ => {}
        }
    }
    Some(rest)
}

/// `state: Recovery(<start>, ..)` of the controller's derived Debug (cubic.rs:44-49, 138).
fn recovery_start(cc: &CubicCongestionController) -> Option<String> {
    let text = format!("{cc:?}");
    let state = debug_field(&text, "state")?;
    state.strip_prefix("Recovery(").map(|s| s.split(", ").next().unwrap_or("").to_string())
}

// ---------------------------------------------------------------- congestion controller

/// s2n's CUBIC, every call forwarded unchanged; a clone of its state after each call.
#[derive(Clone)]
struct Tracked {
    cc: CubicCongestionController,
    obs: SharedObs,
    /// The path's RTT estimator as last handed to a controller call: the state before the
    /// next update_rtt, from which the qlog writer recovers the ACK delay s2n took off.
    last_rtt: Option<RttEstimator>,
}

impl core::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.cc.fmt(f)
    }
}

impl Tracked {
    fn publish(&self) {
        self.obs.lock().unwrap().cc = Some(self.cc.clone());
    }
    fn rtt(&self, rtt: &RttEstimator) {
        if rtt.first_rtt_sample().is_some() {
            self.obs.lock().unwrap().rtt = Some((rtt.smoothed_rtt(), rtt.min_rtt(), rtt.latest_rtt()));
        }
    }
}

impl CongestionController for Tracked {
    type PacketInfo = <CubicCongestionController as CongestionController>::PacketInfo;

    fn congestion_window(&self) -> u32 {
        self.cc.congestion_window()
    }
    fn bytes_in_flight(&self) -> u32 {
        self.cc.bytes_in_flight()
    }
    fn is_congestion_limited(&self) -> bool {
        self.cc.is_congestion_limited()
    }
    fn requires_fast_retransmission(&self) -> bool {
        self.cc.requires_fast_retransmission()
    }
    fn on_packet_sent<Pub: Publisher>(
        &mut self,
        time_sent: Timestamp,
        sent_bytes: usize,
        app_limited: Option<bool>,
        rtt_estimator: &RttEstimator,
        publisher: &mut Pub,
    ) -> Self::PacketInfo {
        let r = self.cc.on_packet_sent(time_sent, sent_bytes, app_limited, rtt_estimator, publisher);
        self.last_rtt = Some(*rtt_estimator);
        self.publish();
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            // manager.rs:236-243: 0 bytes for a packet that is not congestion controlled
            // (only ACK / PADDING frames); app_limited from application.rs:279 (None in the
            // Initial and Handshake spaces, handshake.rs:170, initial.rs:219)
            q.last_send = Some((sent_bytes, app_limited));
        }
        r
    }
    fn on_rtt_update<Pub: Publisher>(
        &mut self,
        time_sent: Timestamp,
        now: Timestamp,
        rtt_estimator: &RttEstimator,
        publisher: &mut Pub,
    ) {
        self.cc.on_rtt_update(time_sent, now, rtt_estimator, publisher);
        self.rtt(rtt_estimator);
        self.publish();
        let before = self.last_rtt.replace(*rtt_estimator);
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            let delay = recovered_ack_delay(before, rtt_estimator, now.saturating_duration_since(time_sent), now);
            if let Some(ack) = q.ack.as_mut() {
                ack.delay_us = Some(delay);
            }
            q.sampled = true;
        }
    }
    fn on_ack<Pub: Publisher>(
        &mut self,
        newest_acked_time_sent: Timestamp,
        bytes_acknowledged: usize,
        newest_acked_packet_info: Self::PacketInfo,
        rtt_estimator: &RttEstimator,
        random_generator: &mut dyn RandomGenerator,
        ack_receive_time: Timestamp,
        publisher: &mut Pub,
    ) {
        self.cc.on_ack(
            newest_acked_time_sent,
            bytes_acknowledged,
            newest_acked_packet_info,
            rtt_estimator,
            random_generator,
            ack_receive_time,
            publisher,
        );
        self.last_rtt = Some(*rtt_estimator);
        self.rtt(rtt_estimator);
        self.publish();
    }
    fn on_packet_lost<Pub: Publisher>(
        &mut self,
        lost_bytes: u32,
        packet_info: Self::PacketInfo,
        persistent_congestion: bool,
        new_loss_burst: bool,
        random_generator: &mut dyn RandomGenerator,
        timestamp: Timestamp,
        publisher: &mut Pub,
    ) {
        let before = recovery_start(&self.cc);
        self.cc.on_packet_lost(
            lost_bytes,
            packet_info,
            persistent_congestion,
            new_loss_burst,
            random_generator,
            timestamp,
            publisher,
        );
        // cubic.rs:622-630: on_congestion_event (always called here, cubic.rs:409, 439) takes
        // effect unless a recovery period is on; persistent congestion (cubic.rs:416-420) then
        // puts the state back to SlowStart, still after one event.
        if before.is_none() {
            self.obs.lock().unwrap().congestion_events += 1;
        }
        self.publish();
        if persistent_congestion {
            if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
                q.persistent = true;
            }
        }
    }
    fn on_explicit_congestion<Pub: Publisher>(&mut self, ce_count: u64, event_time: Timestamp, publisher: &mut Pub) {
        let before = recovery_start(&self.cc);
        self.cc.on_explicit_congestion(ce_count, event_time, publisher);
        // cubic.rs:622-630: on_congestion_event (always called here, cubic.rs:409, 439) takes
        // effect unless a recovery period is on; persistent congestion (cubic.rs:416-420) then
        // puts the state back to SlowStart, still after one event.
        if before.is_none() {
            self.obs.lock().unwrap().congestion_events += 1;
        }
        self.publish();
    }
    fn on_mtu_update<Pub: Publisher>(&mut self, max_data_size: u16, publisher: &mut Pub) {
        self.cc.on_mtu_update(max_data_size, publisher);
        self.publish();
    }
    fn on_packet_discarded<Pub: Publisher>(&mut self, bytes_sent: usize, publisher: &mut Pub) {
        self.cc.on_packet_discarded(bytes_sent, publisher);
        self.publish();
        // RFC 9002 §6.4: the Initial / Handshake packets in flight leave with their keys,
        // after s2n's own RecoveryMetrics record (manager.rs:804-823): the state after it.
        self.obs.lock().unwrap().qlog_metrics();
    }
    fn earliest_departure_time(&self) -> Option<Timestamp> {
        self.cc.earliest_departure_time()
    }
    fn send_quantum(&self) -> Option<usize> {
        self.cc.send_quantum()
    }
}

#[derive(Debug)]
struct CcEndpoint {
    inner: s2n_quic::provider::congestion_controller::Cubic,
    obs: SharedObs,
}

impl core::fmt::Debug for Obs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Obs")
    }
}

impl s2n_quic::provider::congestion_controller::Endpoint for CcEndpoint {
    type CongestionController = Tracked;
    fn new_congestion_controller(&mut self, path_info: PathInfo) -> Tracked {
        let cc = self.inner.new_congestion_controller(path_info);
        let t = Tracked { cc, obs: self.obs.clone(), last_rtt: None };
        t.publish();
        t
    }
}

// ---------------------------------------------------------------- events

struct Events {
    obs: SharedObs,
}

impl Subscriber for Events {
    type ConnectionContext = ();

    fn create_connection_context(&mut self, _meta: &ConnectionMeta, _info: &ConnectionInfo) {}

    fn on_packet_sent(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::PacketSent) {
        let mut obs = self.obs.lock().unwrap();
        obs.packets_sent += 1;
        obs.qlog_packet_sent(e);
    }
    fn on_packet_lost(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::PacketLost) {
        let mut obs = self.obs.lock().unwrap();
        obs.packets_lost += 1;
        if let Some(q) = obs.qlog.as_mut() {
            q.packet_lost(e);
        }
    }
    fn on_frame_sent(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::FrameSent) {
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            q.frames_sent.push(frame_type(&e.frame));
        }
    }
    fn on_frame_received(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::FrameReceived) {
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            q.frame_received(e);
        }
    }
    fn on_ack_range_received(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::AckRangeReceived) {
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            if let Some(ack) = q.ack.as_mut() {
                if ack.header == header_of(&e.packet_header) {
                    ack.ranges.push((*e.ack_range.start(), *e.ack_range.end()));
                }
            }
        }
    }
    fn on_congestion(&mut self, _c: &mut (), _m: &ConnectionMeta, _e: &events::Congestion) {
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            q.congestion();
        }
    }
    fn on_recovery_metrics(&mut self, _c: &mut (), _m: &ConnectionMeta, _e: &events::RecoveryMetrics) {
        self.obs.lock().unwrap().qlog_metrics();
    }
    fn on_key_space_discarded(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::KeySpaceDiscarded) {
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            q.key_space_discarded(e);
        }
    }
    fn on_transport_parameters_received(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::TransportParametersReceived) {
        if let Some(q) = self.obs.lock().unwrap().qlog.as_mut() {
            let p = &e.transport_parameters;
            q.flush_ack();
            let t = q.now();
            q.record(t, "transport:parameters_set", &format!(
                "\"owner\":\"remote\",\"max_ack_delay\":{},\"ack_delay_exponent\":{},\"max_udp_payload_size\":{}",
                ms3(p.max_ack_delay.as_micros() as u64), p.ack_delay_exponent, p.max_udp_payload_size));
        }
    }
    fn on_handshake_status_updated(&mut self, _c: &mut (), _m: &ConnectionMeta, e: &events::HandshakeStatusUpdated) {
        // Complete (the client has the server's Finished; the server sent its own), as
        // quinn's Event::Connected and ngtcp2's handshake_completed: the harness starts its
        // liveness clock here (ccdiff/connection/run.py observe()).
        if let events::HandshakeStatus::Complete { .. } = e.status {
            self.obs.lock().unwrap().established = true;
        }
    }
    fn on_connection_closed(&mut self, _c: &mut (), _m: &ConnectionMeta, _e: &events::ConnectionClosed) {
        self.obs.lock().unwrap().closed = true;
    }
}

// ---------------------------------------------------------------- qlog (qlog=PATH, the client's)
//
// s2n-quic 1.91.0 has no qlog writer; this one writes qlog 0.3 as JSON-SEQ (RFC 7464) from
// s2n's own event subscriber (s2n-quic-core src/event/generated.rs) and the forwarding
// controller above, in the names ccdiff's importer reads (docs/qlog-import.md).  Times are the
// virtual clock's (ms with µs digits, relative to 0), so one seed gives one file, byte for byte.
// "manager.rs:N" is s2n-quic-transport-0.91.0/src/recovery/manager.rs.
//
//   transport:packet_sent      PacketSent (application.rs:310, handshake.rs:183, initial.rs:232,
//                              published right after the controller's on_packet_sent):
//                              header.packet_type / packet_number, raw.length (packet_len: the
//                              bytes s2n counts in flight), frames (their frame_type, from the
//                              FrameSent events before it, transmission/context.rs:141, 165).
//                              A packet s2n does not count in flight (0 bytes to the controller,
//                              manager.rs:236-243: ACK and PADDING only, frame/congestion_controlled.rs)
//                              whose frames the RFC 9002 §2 rule would call in flight (PADDING:
//                              the client's padded Initial ACKs) says `ccdiff_in_flight: false`.
//   ccdiff:app_limited         after each packet in flight: the app_limited s2n handed its
//                              controller for it (application.rs:279 via manager.rs:244; None in
//                              Initial/Handshake, written as true: cubic.rs:221-232 then decides on
//                              under-utilisation alone, as the adapter does with true), marked
//                              `written_by` (qlog_dialects.ShimAppLimited, as the quinn shim's).
//   transport:packet_received  a packet with an ACK frame (FrameReceived, space/mod.rs:947) and
//                              its ranges (AckRangeReceived, manager.rs:507), ack_delay as s2n's
//                              RTT estimator took it (recovered_ack_delay), ecn counts; or with a
//                              CONNECTION_CLOSE frame.  Written before the losses and the state
//                              the ACK caused (manager.rs:459-483: RTT, losses, on_ack, metrics).
//   recovery:packet_lost       PacketLost (manager.rs:1006) of a packet in flight.
//   recovery:congestion_state_updated  trigger persistent_congestion, after the losses of a
//                              batch in which s2n told its controller so (manager.rs:966-970).
//   recovery:metrics_updated   the controller's congestion_window, bytes_in_flight, ssthresh
//                              (HybridSlowStart.threshold, when set) and RTTs, when they changed:
//                              after each packet_sent, at each RecoveryMetrics (manager.rs:211,
//                              483: after a timeout, after an ACK frame), after a key discard's
//                              on_packet_discarded (manager.rs:823, after s2n's own record), and
//                              at the end of every call.
//   security:key_retired       KeySpaceDiscarded (initial.rs:347, handshake.rs:297).
//   transport:parameters_set   the server's (owner remote) max_ack_delay, ack_delay_exponent and
//                              max_udp_payload_size (TransportParametersReceived).
//   recovery:parameters_set    max_datagram_size (the mds the MTU is fixed at) and initial_rtt
//                              (333 ms, rtt_estimator.rs:17), at the start, marked `written_by`.

struct PendingAck {
    t_us: u64,
    header: (&'static str, u64),
    ranges: Vec<(u64, u64)>,
    delay_us: Option<u64>,
    ecn: Option<(u64, u64, u64)>,
}

struct QlogW {
    out: BufWriter<File>,
    error: Option<String>,
    clock: Arc<VClock>,
    frames_sent: Vec<&'static str>,
    last_send: Option<(usize, Option<bool>)>,
    ack: Option<PendingAck>,
    persistent: bool,
    last_metrics: Option<[u64; 6]>,
    /// an RTT sample taken (on_rtt_update) since the last metrics_updated
    sampled: bool,
    /// an app_limited mark written (the first says where the value is read)
    marked: bool,
    /// "client" or "server": the vantage point, and whose keys go
    role: &'static str,
    /// CCDIFF_S2N_QLOG_DEBUG set when the file was opened: each metrics_updated also carries
    /// the controller's derived Debug text (`cc_debug`: CUBIC's epoch, W_max, K, ...), a
    /// diagnosis aid; not read by the import.
    debug: bool,
}

fn qlog_time(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

fn header_of(h: &events::PacketHeader) -> (&'static str, u64) {
    match h {
        events::PacketHeader::Initial { number, .. } => ("initial", *number),
        events::PacketHeader::Handshake { number, .. } => ("handshake", *number),
        events::PacketHeader::ZeroRtt { number, .. } => ("0RTT", *number),
        events::PacketHeader::OneRtt { number, .. } => ("1RTT", *number),
        _ => ("unknown", 0),
    }
}

fn frame_type(f: &events::Frame) -> &'static str {
    use events::Frame as F;
    match f {
        F::Padding { .. } => "padding",
        F::Ping { .. } => "ping",
        F::Ack { .. } => "ack",
        F::ResetStream { .. } => "reset_stream",
        F::StopSending { .. } => "stop_sending",
        F::Crypto { .. } => "crypto",
        F::NewToken { .. } => "new_token",
        F::Stream { .. } => "stream",
        F::MaxData { .. } => "max_data",
        F::MaxStreamData { .. } => "max_stream_data",
        F::MaxStreams { .. } => "max_streams",
        F::DataBlocked { .. } => "data_blocked",
        F::StreamDataBlocked { .. } => "stream_data_blocked",
        F::StreamsBlocked { .. } => "streams_blocked",
        F::NewConnectionId { .. } => "new_connection_id",
        F::RetireConnectionId { .. } => "retire_connection_id",
        F::PathChallenge { .. } => "path_challenge",
        F::PathResponse { .. } => "path_response",
        F::ConnectionClose { .. } => "connection_close",
        F::HandshakeDone { .. } => "handshake_done",
        F::Datagram { .. } => "datagram",
        _ => "unknown",
    }
}

fn ms3(us: u64) -> String {
    qlog_time(us)
}

/// The ACK delay s2n's RTT estimator took off the sample: the value that, handed to
/// update_rtt(delay, sample, now, handshake confirmed, ApplicationData) from the estimator
/// before the ACK, gives the estimator after it (rtt_estimator.rs:251-330), in µs.  The ACK
/// frame's own field is not in s2n's events (FrameReceived's Frame::Ack has the largest and the
/// range count only), so it is recovered from smoothed_rtt = 7/8 before + 1/8 adjusted
/// (weighted_average, rtt_estimator.rs:421) and checked by running update_rtt again; in the
/// Initial space (no delay, rtt_estimator.rs:282-284), on a first sample, or where the delay
/// was not subtracted (min_rtt + delay >= latest_rtt) it is 0, which gives the same estimator.
fn recovered_ack_delay(before: Option<RttEstimator>, after: &RttEstimator, sample: Duration, now: Timestamp) -> u64 {
    use s2n_quic_core::packet::number::PacketNumberSpace;
    let Some(before) = before else { return 0 };
    if before.first_rtt_sample().is_none() || after.first_rtt_sample() == Some(now) && before.first_rtt_sample() != Some(now) {
        return 0;
    }
    let same = |d: u64| {
        let mut e = before;
        e.update_rtt(Duration::from_micros(d), sample, now, true, PacketNumberSpace::ApplicationData);
        e.smoothed_rtt() == after.smoothed_rtt() && e.rttvar() == after.rttvar()
    };
    if same(0) {
        return 0;
    }
    let b = before.smoothed_rtt().as_nanos() as u64;
    let a = after.smoothed_rtt().as_nanos() as u64;
    let adjusted = a.saturating_sub(b / 8 * 7).saturating_mul(8);
    let latest = after.latest_rtt().as_nanos() as u64;
    let guess = latest.saturating_sub(adjusted) / 1000;
    for d in [guess, guess + 1, guess.saturating_sub(1), guess + 2, guess.saturating_sub(2)] {
        if same(d) {
            return d;
        }
    }
    guess
}

impl QlogW {
    fn create(path: &str, clock: Arc<VClock>, mds: u64, server: bool) -> Result<QlogW, String> {
        let role = if server { "server" } else { "client" };
        let f = File::create(path).map_err(|e| format!("qlog={path}: {e}"))?;
        let mut q = QlogW {
            out: BufWriter::new(f),
            error: None,
            clock,
            frames_sent: Vec::new(),
            last_send: None,
            ack: None,
            persistent: false,
            last_metrics: None,
            marked: false,
            sampled: false,
            debug: std::env::var_os("CCDIFF_S2N_QLOG_DEBUG").is_some(),
            role: "client",
        };
        q.raw(&format!("{{\"qlog_version\":\"0.3\",\"qlog_format\":\"JSON-SEQ\",\"title\":\"s2n-quic 1.91.0 {role} (ccdiff connection shim)\",\
               \"description\":\"written by the ccdiff connection shim from s2n-quic's event subscriber and its controller calls; virtual time\",\
               \"trace\":{{\"vantage_point\":{{\"name\":\"s2n-quic\",\"type\":\"{role}\"}},\
               \"common_fields\":{{\"time_format\":\"relative\",\"reference_time\":0}}}}}}"));
        q.role = role;
        q.record(0, "recovery:parameters_set",
                 &format!("\"max_datagram_size\":{mds},\"initial_rtt\":333,\"written_by\":\"ccdiff connection shim\""));
        Ok(q)
    }

    fn raw(&mut self, text: &str) {
        if self.error.is_some() {
            return;
        }
        let r = self.out.write_all(b"\x1e").and_then(|_| self.out.write_all(text.as_bytes())).and_then(|_| self.out.write_all(b"\n"));
        if let Err(e) = r {
            self.error = Some(e.to_string());
        }
    }

    fn record(&mut self, t_us: u64, name: &str, data: &str) {
        self.raw(&format!("{{\"time\":{},\"name\":\"{name}\",\"data\":{{{data}}}}}", qlog_time(t_us)));
    }

    fn now(&self) -> u64 {
        self.clock.now_us()
    }

    /// The pending ACK's packet_received, once its ranges and delay are known.
    fn flush_ack(&mut self) {
        let Some(ack) = self.ack.take() else { return };
        let mut ranges = ack.ranges.clone();
        ranges.sort_unstable();
        let list: Vec<String> = ranges.iter().map(|(lo, hi)| format!("[{lo},{hi}]")).collect();
        let ecn = match ack.ecn {
            Some((e0, e1, ce)) => format!(",\"ect0\":{e0},\"ect1\":{e1},\"ce\":{ce}"),
            None => String::new(),
        };
        let delay = match ack.delay_us {
            Some(d) => format!(",\"ack_delay\":{}", ms3(d)),
            None => ",\"ack_delay\":0".to_string(),
        };
        self.record(ack.t_us, "transport:packet_received", &format!(
            "\"header\":{{\"packet_type\":\"{}\",\"packet_number\":{}}},\"frames\":[{{\"frame_type\":\"ack\",\"acked_ranges\":[{}]{delay}{ecn}}}]",
            ack.header.0, ack.header.1, list.join(",")));
    }

    fn frame_received(&mut self, e: &events::FrameReceived) {
        match &e.frame {
            events::Frame::Ack { ecn_counts, .. } => {
                self.flush_ack();
                self.ack = Some(PendingAck {
                    t_us: self.now(),
                    header: header_of(&e.packet_header),
                    ranges: Vec::new(),
                    delay_us: None,
                    ecn: ecn_counts.as_ref().map(|c| (c.ect_0_count, c.ect_1_count, c.ce_count)),
                });
            }
            events::Frame::ConnectionClose { .. } => {
                self.flush_ack();
                let (ty, pn) = header_of(&e.packet_header);
                self.record(self.now(), "transport:packet_received", &format!(
                    "\"header\":{{\"packet_type\":\"{ty}\",\"packet_number\":{pn}}},\"frames\":[{{\"frame_type\":\"connection_close\"}}]"));
            }
            _ => {}
        }
    }

    fn packet_lost(&mut self, e: &events::PacketLost) {
        self.flush_ack();
        if e.bytes_lost == 0 {
            return; // not in flight (manager.rs:236-243): no trace packet, no congestion signal
        }
        let (ty, pn) = header_of(&e.packet_header);
        self.record(self.now(), "recovery:packet_lost", &format!(
            "\"header\":{{\"packet_type\":\"{ty}\",\"packet_number\":{pn}}},\"raw\":{{\"length\":{}}}{}",
            e.bytes_lost, if e.is_mtu_probe { ",\"trigger\":\"mtu_probe\"" } else { "" }));
    }

    fn congestion(&mut self) {
        self.flush_ack();
        if std::mem::take(&mut self.persistent) {
            self.record(self.now(), "recovery:congestion_state_updated",
                        "\"new\":\"slow_start\",\"trigger\":\"persistent_congestion\"");
        }
    }

    fn key_space_discarded(&mut self, e: &events::KeySpaceDiscarded) {
        self.flush_ack();
        let space = match e.space {
            events::KeySpace::Initial { .. } => "initial",
            events::KeySpace::Handshake { .. } => "handshake",
            events::KeySpace::ZeroRtt { .. } => "0rtt",
            _ => "1rtt",
        };
        self.record(self.now(), "security:key_retired",
                    &format!("\"key_type\":\"{}_{space}_secret\",\"trigger\":\"s2n-quic KeySpaceDiscarded\"", self.role));
    }

    /// Flush the file; the first write error, if any.
    fn check(&mut self) -> Result<(), String> {
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e.to_string());
            }
        }
        match &self.error {
            Some(e) => Err(format!("qlog: writing the file failed: {e}")),
            None => Ok(()),
        }
    }
}

impl Obs {
    /// metrics_updated with the controller's state now, when it changed since the last one.
    fn qlog_metrics(&mut self) {
        let Some(q) = self.qlog.as_mut() else { return };
        q.flush_ack();
        let Some(cc) = self.cc.as_ref() else { return };
        let text = format!("{cc:?}");
        let ssthresh = debug_field(&text, "threshold")
            .and_then(|t| t.parse::<f64>().ok())
            .map(|t| if t >= f32::MAX as f64 { UNKNOWN } else { t as u64 })
            .unwrap_or(UNKNOWN);
        let us = |d: Duration| d.as_micros() as u64;
        let (srtt, minrtt, lrtt) = match self.rtt {
            Some((s, m, l)) => (us(s), us(m), us(l)),
            None => (UNKNOWN, UNKNOWN, UNKNOWN),
        };
        let m = [cc.congestion_window() as u64, cc.bytes_in_flight() as u64, ssthresh, srtt, minrtt, lrtt];
        if q.last_metrics == Some(m) && !q.sampled {
            return;
        }
        // cwnd and bytes in flight always; ssthresh and the RTTs when they changed (the import
        // keeps the last value of each, as for picoquic's and quinn's changed-fields records)
        let last = q.last_metrics.replace(m);
        let mut data = format!("\"congestion_window\":{},\"bytes_in_flight\":{}", m[0], m[1]);
        if ssthresh != UNKNOWN && last.is_none_or(|l| l[2] != ssthresh) {
            data += &format!(",\"ssthresh\":{ssthresh}");
        }
        // (and after every RTT sample: the import reads an ACK's sample from the record after it)
        if srtt != UNKNOWN && (std::mem::take(&mut q.sampled) || last.is_none_or(|l| l[3..] != m[3..])) {
            data += &format!(",\"smoothed_rtt\":{},\"min_rtt\":{},\"latest_rtt\":{}", ms3(srtt), ms3(minrtt), ms3(lrtt));
        }
        if q.debug {
            data += &format!(",\"cc_debug\":\"{}\"", text.replace('"', "'"));
        }
        let t = q.now();
        q.record(t, "recovery:metrics_updated", &data);
    }

    fn qlog_packet_sent(&mut self, e: &events::PacketSent) {
        let Some(q) = self.qlog.as_mut() else { return };
        q.flush_ack();
        let (ty, pn) = header_of(&e.packet_header);
        let frames = std::mem::take(&mut q.frames_sent);
        // on_transmit_close (application.rs:366-425) publishes PacketSent without the controller
        let (bytes, app_limited) = q.last_send.take().unwrap_or((0, None));
        let list: Vec<String> = frames.iter().map(|f| format!("{{\"frame_type\":\"{f}\"}}")).collect();
        let rfc_in_flight = !frames.iter().all(|f| *f == "ack" || *f == "connection_close");
        let in_flight = bytes > 0;
        let mark = if !in_flight && rfc_in_flight { ",\"ccdiff_in_flight\":false" } else { "" };
        let t = q.now();
        q.record(t, "transport:packet_sent", &format!(
            "\"header\":{{\"packet_type\":\"{ty}\",\"packet_number\":{pn}}},\"raw\":{{\"length\":{}}},\"frames\":[{}]{mark}",
            e.packet_len, list.join(",")));
        if in_flight {
            self.qlog_metrics();
            let q = self.qlog.as_mut().unwrap();
            let read_from = if std::mem::replace(&mut q.marked, true) {
                ""
            } else {
                ",\"read_from\":\"the app_limited s2n-quic-transport hands its controller's on_packet_sent \
                 (ApplicationSpace::on_packet_sent, src/space/application.rs:279; None in Initial/Handshake: true)\""
            };
            q.record(t, "ccdiff:app_limited", &format!(
                "\"app_limited\":{},\"written_by\":\"ccdiff connection shim\"{read_from}", app_limited.unwrap_or(true)));
        }
    }

    /// At the end of every call: what is pending, the state, the file flushed.
    fn qlog_end_of_call(&mut self) -> Result<(), String> {
        if self.qlog.is_none() {
            return Ok(());
        }
        self.qlog_metrics();
        self.qlog.as_mut().unwrap().check()
    }
}

// ---------------------------------------------------------------- I/O

struct RxQueue {
    items: VecDeque<(Tuple, Vec<u8>)>,
}

impl rx::Queue for RxQueue {
    type Handle = Tuple;
    fn for_each<F: FnMut(datagram::Header<Tuple>, &mut [u8])>(&mut self, mut on_packet: F) {
        while let Some((path, mut payload)) = self.items.pop_front() {
            on_packet(datagram::Header { path, ecn: ExplicitCongestionNotification::default() }, &mut payload);
        }
    }
    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

struct TxQueue {
    room: usize,
    mds: usize,
    out: VecDeque<Vec<u8>>,
}

impl tx::Queue for TxQueue {
    type Handle = Tuple;
    fn push<M: tx::Message<Handle = Tuple>>(&mut self, mut message: M) -> Result<tx::Outcome, tx::Error> {
        if self.out.len() >= self.room {
            return Err(tx::Error::AtCapacity);
        }
        let mut buf = vec![0u8; self.mds];
        let len = message.write_payload(tx::PayloadBuffer::new(&mut buf), 0)?;
        buf.truncate(len);
        self.out.push_back(buf);
        Ok(tx::Outcome { len, index: self.out.len() - 1 })
    }
    fn capacity(&self) -> usize {
        self.room - self.out.len()
    }
}

/// The endpoint, object-safe, on this shim's queues and clock.
trait Driven: Send {
    fn receive(&mut self, rx: &mut RxQueue, clock: &VClock);
    fn transmit(&mut self, tx: &mut TxQueue, clock: &VClock);
    fn poll_wakeups(&mut self, cx: &mut Context<'_>, clock: &VClock) -> Poll<Result<usize, CloseError>>;
    fn timeout(&self) -> Option<s2n_quic_core::time::Timestamp>;
}

impl<E: Endpoint<PathHandle = Tuple>> Driven for E {
    fn receive(&mut self, rx: &mut RxQueue, clock: &VClock) {
        Endpoint::receive(self, rx, clock)
    }
    fn transmit(&mut self, tx: &mut TxQueue, clock: &VClock) {
        Endpoint::transmit(self, tx, clock)
    }
    fn poll_wakeups(&mut self, cx: &mut Context<'_>, clock: &VClock) -> Poll<Result<usize, CloseError>> {
        Endpoint::poll_wakeups(self, cx, clock)
    }
    fn timeout(&self) -> Option<s2n_quic_core::time::Timestamp> {
        Endpoint::timeout(self)
    }
}

type Slot = Arc<Mutex<Option<Box<dyn Driven>>>>;

/// The I/O provider: keeps the endpoint instead of spawning an event loop.
struct ShimIo {
    slot: Slot,
    local: SocketAddr,
    mtu: mtu::Config,
}

impl s2n_quic::provider::io::Provider for ShimIo {
    type PathHandle = Tuple;
    type Error = String;

    fn start<E: Endpoint<PathHandle = Tuple>>(self, mut endpoint: E) -> Result<SocketAddress, String> {
        endpoint.set_mtu_config(self.mtu);
        *self.slot.lock().unwrap() = Some(Box::new(endpoint));
        Ok(self.local.into())
    }
}

// ---------------------------------------------------------------- TLS

#[derive(Debug)]
struct TrustPresented(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for TrustPresented {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// aws-lc-rs's provider as s2n-quic-rustls builds it (cipher_suite.rs: its
/// DEFAULT_CIPHERSUITES), with the seeded SecureRandom and X25519 in X25519's place.
fn crypto_provider(seed: u64, server: bool) -> Arc<rustls::crypto::CryptoProvider> {
    let base = rustls::crypto::aws_lc_rs::default_provider();
    // rustls's CryptoProvider holds its key-exchange groups and SecureRandom as `&'static dyn`:
    // the seeded ones live for the whole process, two small structs leaked per endpoint.
    let x25519: &'static SeededX25519 = Box::leak(Box::new(SeededX25519(Mutex::new(SplitMix::new(seed, server, 5)))));
    let random: &'static TlsRandom = Box::leak(Box::new(TlsRandom(Mutex::new(SplitMix::new(seed, server, 6)))));
    let kx_groups = base
        .kx_groups
        .iter()
        .map(|g| if g.name() == rustls::NamedGroup::X25519 { x25519 as &'static dyn rustls::crypto::SupportedKxGroup } else { *g })
        .collect();
    #[allow(deprecated)]
    let cipher_suites = s2n_quic::provider::tls::rustls::DEFAULT_CIPHERSUITES.to_vec();
    Arc::new(rustls::crypto::CryptoProvider { cipher_suites, kx_groups, secure_random: random, ..base })
}

// ---------------------------------------------------------------- options

struct Opts {
    mds: u64,
    cert: Option<String>,
    key: Option<String>,
    qlog: Option<String>,
}

fn parse_options(s: &str) -> Result<Opts, String> {
    let mut o = Opts { mds: 1200, cert: None, key: None, qlog: None };
    for item in s.split(';').map(str::trim).filter(|x| !x.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("option {item:?} is not key=value"))?;
        match k.trim() {
            "mds" => {
                o.mds = v.trim().parse().map_err(|_| format!("mds={v}: not a number"))?;
                if o.mds < MIN_MDS || o.mds + IPV4_UDP_HEADERS > u16::MAX as u64 {
                    return Err(format!("mds={v}: s2n-quic needs 1200 <= mds <= {}", u16::MAX as u64 - IPV4_UDP_HEADERS));
                }
            }
            "cert" => o.cert = Some(v.trim().to_string()),
            "key" => o.key = Some(v.trim().to_string()),
            "qlog" => {
                // the rest of the item: a path may hold '='
                let path = v.trim();
                if path.is_empty() {
                    return Err("qlog=: no path".into());
                }
                o.qlog = Some(path.to_string());
            }
            "cc" => {
                if v.trim() != "cubic" {
                    return Err(format!("cc={v}: s2n-quic has cubic only here (no Reno in s2n-quic-core)"));
                }
            }
            other => return Err(format!("unknown option {other:?} (s2n-quic accepts: {OPTIONS})")),
        }
    }
    Ok(o)
}

// ---------------------------------------------------------------- the endpoint handle

struct Conn {
    server: bool,
    clock: Arc<VClock>,
    slot: Slot,
    mds: usize,
    obs: SharedObs,
    client: Option<s2n_quic::Client>,
    srv: Option<s2n_quic::Server>,
    attempt: Option<s2n_quic::client::ConnectionAttempt>,
    conn: Option<s2n_quic::Connection>,
    stream: Option<BidirectionalStream>,
    endpoint_closed: bool,
    bytes_sent: u64,
    bytes_read: u64,
    fin_read: bool,
    fin_sent: bool,
    error: CString,
}

fn noop_cx<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let waker = s2n_quic_core::task::waker::noop();
    let mut cx = Context::from_waker(&waker);
    f(&mut cx)
}

impl Conn {
    fn new(server: bool, now_us: u64, seed: u64, options: &str) -> Result<Conn, String> {
        let opts = parse_options(options)?;
        let clock = Arc::new(VClock::default());
        clock.set(now_us);
        let obs: SharedObs = Arc::new(Mutex::new(Obs::default()));
        if let Some(path) = opts.qlog.as_deref() {
            obs.lock().unwrap().qlog = Some(QlogW::create(path, clock.clone(), opts.mds, server)?);
        }
        let slot: Slot = Arc::new(Mutex::new(None));
        let mtu_value = (opts.mds + IPV4_UDP_HEADERS) as u16;
        let mtu = mtu::Config::builder()
            .with_max_mtu(mtu_value)
            .and_then(|b| b.with_initial_mtu(mtu_value))
            .and_then(|b| b.with_base_mtu(mtu_value))
            .and_then(|b| b.build())
            .map_err(|e| format!("mtu config: {e}"))?;
        let io = ShimIo { slot: slot.clone(), local: if server { SERVER_ADDR } else { CLIENT_ADDR }, mtu };
        let limits = s2n_quic::provider::limits::Limits::new()
            .with_data_window(u32::MAX as u64)
            .and_then(|l| l.with_bidirectional_local_data_window(u32::MAX as u64))
            .and_then(|l| l.with_bidirectional_remote_data_window(u32::MAX as u64))
            .and_then(|l| l.with_unidirectional_data_window(u32::MAX as u64))
            .and_then(|l| l.with_max_idle_timeout(Duration::from_secs(3600)))
            .and_then(|l| l.with_max_handshake_duration(Duration::from_secs(600)))
            .map_err(|e| format!("limits: {e}"))?;
        let random = SeededRandom { public: SplitMix::new(seed, server, 1), private: SplitMix::new(seed, server, 2) };
        let cids = SeededCids { rng: SplitMix::new(seed, server, 3) };
        let resets = SeededResetTokens { rng: SplitMix::new(seed, server, 4) };
        let events = Events { obs: obs.clone() };
        let cc = CcEndpoint { inner: Default::default(), obs: obs.clone() };
        let provider = crypto_provider(seed, server);
        let time: Arc<dyn rustls::time_provider::TimeProvider> = Arc::new(TlsTime(clock.clone()));

        let mut conn = Conn {
            server,
            clock: clock.clone(),
            slot: slot.clone(),
            mds: opts.mds as usize,
            obs,
            client: None,
            srv: None,
            attempt: None,
            conn: None,
            stream: None,
            endpoint_closed: false,
            bytes_sent: 0,
            bytes_read: 0,
            fin_read: false,
            fin_sent: false,
            error: CString::default(),
        };

        if server {
            let cert = opts.cert.ok_or("the server needs cert=PATH")?;
            let key = opts.key.ok_or("the server needs key=PATH")?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
                .map_err(|e| format!("cert={cert}: {e}"))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("cert={cert}: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("key={key}: {e}"))?;
            let mut config = rustls::ServerConfig::builder_with_details(provider, time)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| format!("rustls: {e}"))?
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .map_err(|e| format!("rustls: {e}"))?;
            // as s2n-quic-rustls's server Builder::build (server.rs:166-172)
            config.ignore_client_order = true;
            config.max_fragment_size = None;
            config.alpn_protocols = vec![ALPN.to_vec()];
            #[allow(deprecated)]
            let tls = s2n_quic::provider::tls::rustls::Server::new(config);
            let server = s2n_quic::Server::builder()
                .with_io(io)
                .and_then(|b| b.with_tls(tls))
                .and_then(|b| b.with_limits(limits))
                .and_then(|b| b.with_random(random))
                .and_then(|b| b.with_connection_id(cids))
                .and_then(|b| b.with_stateless_reset_token(resets))
                .and_then(|b| b.with_event(events))
                .and_then(|b| b.with_congestion_controller(cc))
                .map_err(|e| format!("s2n-quic server builder: {e}"))?
                .start()
                .map_err(|e| format!("s2n-quic server start: {e}"))?;
            conn.srv = Some(server);
        } else {
            let verifier = Arc::new(TrustPresented(provider.clone()));
            let mut config = rustls::ClientConfig::builder_with_details(provider, time)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| format!("rustls: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            // as s2n-quic-rustls's client Builder::build (client.rs:161-185)
            config.max_fragment_size = None;
            config.alpn_protocols = vec![ALPN.to_vec()];
            #[allow(deprecated)]
            let tls = s2n_quic::provider::tls::rustls::Client::new(config);
            let client = s2n_quic::Client::builder()
                .with_io(io)
                .and_then(|b| b.with_tls(tls))
                .and_then(|b| b.with_limits(limits))
                .and_then(|b| b.with_random(random))
                .and_then(|b| b.with_connection_id(cids))
                .and_then(|b| b.with_stateless_reset_token(resets))
                .and_then(|b| b.with_event(events))
                .and_then(|b| b.with_congestion_controller(cc))
                .map_err(|e| format!("s2n-quic client builder: {e}"))?
                .start()
                .map_err(|e| format!("s2n-quic client start: {e}"))?;
            let connect = s2n_quic::client::Connect::new(SERVER_ADDR).with_server_name(SERVER_NAME);
            conn.attempt = Some(client.connect(connect));
            conn.client = Some(client);
        }
        if conn.slot.lock().unwrap().is_none() {
            return Err("s2n-quic did not start the endpoint through the I/O provider".into());
        }
        conn.pump()?;
        conn.obs.lock().unwrap().qlog_end_of_call()?;
        Ok(conn)
    }

    fn with_endpoint<R>(&self, f: impl FnOnce(&mut dyn Driven) -> R) -> R {
        let mut slot = self.slot.lock().unwrap();
        f(slot.as_mut().expect("endpoint").as_mut())
    }

    /// The application side and the endpoint's wakeups, until nothing moves.
    fn pump(&mut self) -> Result<(), String> {
        for _ in 0..10_000 {
            let mut progress = false;
            noop_cx(|cx| -> Result<(), String> {
                if let Some(attempt) = self.attempt.as_mut() {
                    match std::pin::Pin::new(attempt).poll(cx) {
                        Poll::Ready(Ok(c)) => {
                            self.conn = Some(c);
                            self.attempt = None;
                            progress = true;
                        }
                        Poll::Ready(Err(e)) => {
                            self.attempt = None;
                            return Err(format!("connection attempt failed: {e}"));
                        }
                        Poll::Pending => {}
                    }
                }
                if let Some(srv) = self.srv.as_mut() {
                    if self.conn.is_none() {
                        if let Poll::Ready(Some(c)) = srv.poll_accept(cx) {
                            self.conn = Some(c);
                            progress = true;
                        }
                    }
                }
                if self.stream.is_none() {
                    if let Some(c) = self.conn.as_mut() {
                        if self.server {
                            match c.poll_accept_bidirectional_stream(cx) {
                                Poll::Ready(Ok(Some(s))) => {
                                    self.stream = Some(s);
                                    progress = true;
                                }
                                Poll::Ready(Ok(None)) => {}
                                Poll::Ready(Err(e)) => return Err(format!("accept stream: {e}")),
                                Poll::Pending => {}
                            }
                        } else {
                            match c.poll_open_bidirectional_stream(cx) {
                                Poll::Ready(Ok(s)) => {
                                    self.stream = Some(s);
                                    progress = true;
                                }
                                Poll::Ready(Err(e)) => return Err(format!("open stream: {e}")),
                                Poll::Pending => {}
                            }
                        }
                    }
                }
                if !self.endpoint_closed {
                    let clock = self.clock.clone();
                    match self.with_endpoint(|e| e.poll_wakeups(cx, &clock)) {
                        Poll::Ready(Ok(n)) if n > 0 => progress = true,
                        Poll::Ready(Ok(_)) => {}
                        Poll::Ready(Err(_)) => self.endpoint_closed = true,
                        Poll::Pending => {}
                    }
                }
                Ok(())
            })?;
            if !progress {
                return Ok(());
            }
        }
        Err("the application/wakeup pump did not settle in 10000 rounds".into())
    }

    fn recv(&mut self, data: &[u8], now: u64) -> Result<(), String> {
        self.clock.set(now);
        let peer = if self.server { CLIENT_ADDR } else { SERVER_ADDR };
        let local = if self.server { SERVER_ADDR } else { CLIENT_ADDR };
        let path = Tuple {
            remote_address: RemoteAddress::from(SocketAddress::from(peer)),
            local_address: LocalAddress::from(SocketAddress::from(local)),
        };
        let mut rx = RxQueue { items: VecDeque::from([(path, data.to_vec())]) };
        let clock = self.clock.clone();
        self.with_endpoint(|e| e.receive(&mut rx, &clock));
        self.pump()
    }

    fn send(&mut self, buf: &mut [u8], now: u64) -> Result<usize, String> {
        self.clock.set(now);
        self.pump()?;
        let mut tx = TxQueue { room: 1, mds: self.mds, out: VecDeque::new() };
        let clock = self.clock.clone();
        self.with_endpoint(|e| e.transmit(&mut tx, &clock));
        self.pump()?;
        match tx.out.pop_front() {
            None => Ok(0),
            Some(d) => {
                if d.len() > buf.len() {
                    return Err(format!("datagram of {} bytes > buffer of {}", d.len(), buf.len()));
                }
                if d.len() > self.mds {
                    return Err(format!("datagram of {} bytes > mds {}", d.len(), self.mds));
                }
                buf[..d.len()].copy_from_slice(&d);
                self.bytes_sent += d.len() as u64;
                Ok(d.len())
            }
        }
    }

    fn timeout(&self) -> u64 {
        match self.with_endpoint(|e| e.timeout()) {
            Some(t) => unstamp(t),
            None => NO_TIMER,
        }
    }

    fn on_timeout(&mut self, now: u64) -> Result<(), String> {
        self.clock.set(now);
        let mut tx = TxQueue { room: 0, mds: self.mds, out: VecDeque::new() };
        let clock = self.clock.clone();
        self.with_endpoint(|e| e.transmit(&mut tx, &clock));
        self.pump()
    }

    fn write(&mut self, len: u64, fin: bool, now: u64) -> Result<u64, String> {
        self.clock.set(now);
        self.pump()?;
        if self.server {
            return Err("ccd_conn_write on the server".into());
        }
        let Some(stream) = self.stream.as_mut() else { return Ok(0) };
        let mut accepted = 0u64;
        while accepted < len {
            let cap = noop_cx(|cx| stream.poll_send_ready(cx));
            let cap = match cap {
                Poll::Ready(Ok(c)) => c as u64,
                Poll::Ready(Err(e)) => return Err(format!("send stream: {e}")),
                Poll::Pending => 0,
            };
            if cap == 0 {
                break;
            }
            let n = (len - accepted).min(cap).min(ZEROS.len() as u64) as usize;
            stream.send_data(Bytes::from_static(&ZEROS[..n])).map_err(|e| format!("send_data: {e}"))?;
            accepted += n as u64;
        }
        if fin && accepted == len && !self.fin_sent {
            stream.finish().map_err(|e| format!("finish: {e}"))?;
            self.fin_sent = true;
        }
        self.pump()?;
        Ok(accepted)
    }

    fn read(&mut self, now: u64) -> Result<u64, String> {
        self.clock.set(now);
        self.pump()?;
        let mut n = 0u64;
        if let Some(stream) = self.stream.as_mut() {
            while !self.fin_read {
                match noop_cx(|cx| stream.poll_receive(cx)) {
                    Poll::Ready(Ok(Some(b))) => n += b.len() as u64,
                    Poll::Ready(Ok(None)) => self.fin_read = true,
                    Poll::Ready(Err(e)) => return Err(format!("receive stream: {e}")),
                    Poll::Pending => break,
                }
            }
        }
        self.bytes_read += n;
        self.pump()?;
        // The total read so far, as ccdiff's harness takes it (ccdiff/connection/run.py
        // settle(): `read > self.delivered`) and quinn's shim returns it.
        Ok(self.bytes_read)
    }

    fn stats(&self) -> CcdConnStats {
        let obs = self.obs.lock().unwrap();
        let us = |d: Duration| d.as_micros() as u64;
        let (cwnd, bif, ssthresh, in_recovery) = match obs.cc.as_ref() {
            Some(cc) => {
                let text = format!("{cc:?}");
                // HybridSlowStart.threshold is s2n's ssthresh, f32::MAX until set (hybrid_slow_start.rs:77)
                let ssthresh = debug_field(&text, "threshold")
                    .and_then(|t| t.parse::<f64>().ok())
                    .map(|t| if t >= f32::MAX as f64 { UNKNOWN } else { t as u64 })
                    .unwrap_or(UNKNOWN);
                let rec = debug_field(&text, "state").is_some_and(|s| s.starts_with("Recovery("));
                (cc.congestion_window() as u64, cc.bytes_in_flight() as u64, ssthresh, rec as u64)
            }
            None => (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN),
        };
        let (srtt, minrtt, lrtt) = match obs.rtt {
            Some((s, m, l)) => (us(s), us(m), us(l)),
            None => (UNKNOWN, UNKNOWN, UNKNOWN),
        };
        CcdConnStats {
            cwnd,
            bytes_in_flight: bif,
            ssthresh,
            smoothed_rtt_us: srtt,
            min_rtt_us: minrtt,
            latest_rtt_us: lrtt,
            packets_sent: obs.packets_sent,
            packets_lost: obs.packets_lost,
            bytes_sent: self.bytes_sent,
            congestion_events: obs.congestion_events,
            in_recovery,
            stream_bytes_read: self.bytes_read,
            stream_fin_read: self.fin_read as u64,
            established: obs.established as u64,
            closed: (obs.closed || self.endpoint_closed) as u64,
        }
    }
}

use std::future::Future;

// ---------------------------------------------------------------- C ABI

/// One contract call: panics caught, a failure kept as the endpoint's last error; after a
/// fatal error every call but ccd_conn_stats / ccd_conn_last_error / ccd_conn_free fails.
fn guard<R>(conn: *mut c_void, fail: R, f: impl FnOnce(&mut Conn) -> Result<R, String>) -> R {
    // qlog=PATH: what the call left pending, the state, the file flushed; a write error
    // fails the call
    guard_impl(conn, fail, false, |c| {
        let r = f(c)?;
        c.obs.lock().unwrap().qlog_end_of_call()?;
        Ok(r)
    })
}

fn guard_impl<R>(conn: *mut c_void, fail: R, after_error: bool, f: impl FnOnce(&mut Conn) -> Result<R, String>) -> R {
    if conn.is_null() {
        return fail;
    }
    install_panic_hook();
    let c = unsafe { &mut *(conn as *mut Conn) };
    if !after_error && !c.error.as_bytes().is_empty() {
        return fail;
    }
    match catch_unwind(AssertUnwindSafe(|| f(c))) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            c.error = CString::new(e.replace('\0', " ")).unwrap_or_default();
            fail
        }
        Err(_) => {
            c.error = CString::new(panic_message().replace('\0', " ")).unwrap_or_default();
            fail
        }
    }
}

#[no_mangle]
pub extern "C" fn ccd_conn_abi_version() -> u32 {
    CCD_CONN_ABI_VERSION
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_new(
    is_server: i32,
    now_us: u64,
    seed: u64,
    options: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    install_panic_hook();
    let opts = if options.is_null() { String::new() } else { CStr::from_ptr(options).to_string_lossy().into_owned() };
    let r = catch_unwind(AssertUnwindSafe(|| Conn::new(is_server != 0, now_us, seed, &opts)));
    let msg = match r {
        Ok(Ok(c)) => return Box::into_raw(Box::new(c)) as *mut c_void,
        Ok(Err(e)) => e,
        Err(_) => panic_message(),
    };
    if !err.is_null() && err_len > 0 {
        let bytes = msg.replace(['\n', '\0'], " ");
        let n = bytes.len().min(err_len - 1);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
    std::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_free(conn: *mut c_void) {
    if conn.is_null() {
        return;
    }
    install_panic_hook();
    let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(conn as *mut Conn))));
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_recv(conn: *mut c_void, data: *const u8, len: usize, now_us: u64) -> i32 {
    let d = if len == 0 { &[][..] } else { std::slice::from_raw_parts(data, len) };
    guard(conn, -1, |c| c.recv(d, now_us).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_send(
    conn: *mut c_void,
    buf: *mut u8,
    cap: usize,
    now_us: u64,
    send_at_us: *mut u64,
) -> i64 {
    let b = std::slice::from_raw_parts_mut(buf, cap);
    guard(conn, -1, |c| {
        let n = c.send(b, now_us)?;
        if !send_at_us.is_null() {
            *send_at_us = now_us; // s2n paces inside the endpoint (earliest departure time)
        }
        Ok(n as i64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_timeout(conn: *mut c_void, now_us: u64) -> u64 {
    let _ = now_us;
    guard(conn, NO_TIMER, |c| Ok(c.timeout()))
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_on_timeout(conn: *mut c_void, now_us: u64) -> i32 {
    guard(conn, -1, |c| c.on_timeout(now_us).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_write(conn: *mut c_void, len: u64, fin: i32, now_us: u64) -> i64 {
    guard(conn, -1, |c| c.write(len, fin != 0, now_us).map(|n| n as i64))
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_read(conn: *mut c_void, now_us: u64) -> i64 {
    guard(conn, -1, |c| c.read(now_us).map(|n| n as i64))
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_stats(conn: *mut c_void, out: *mut CcdConnStats) -> i32 {
    if out.is_null() {
        return -1;
    }
    guard_impl(conn, -1, true, |c| {
        *out = c.stats();
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ccd_conn_last_error(conn: *mut c_void) -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    if conn.is_null() {
        return EMPTY.as_ptr() as *const c_char;
    }
    (*(conn as *mut Conn)).error.as_ptr()
}
