//! ccdiff connection shim for quinn: quinn-proto's own client and server, sans-io,
//! behind implementations/include/ccdiff_connection.h (ABI 1; docs/connection-mode.md).
//!
//! Each endpoint handle is one `quinn_proto::Endpoint` and, once it exists, its one
//! `Connection`, driven the way quinn-proto's own test pair does it
//! (src/tests/util.rs `Pair` / `TestEndpoint`): datagrams in through
//! `Endpoint::handle` (a new connection through `Endpoint::accept`, the rest as
//! `Connection::handle_event`), datagrams out through `Connection::poll_transmit`
//! (one datagram per call: GSO off), timers through `poll_timeout` /
//! `handle_timeout`, and after every call the connection's endpoint events go to
//! `Endpoint::handle_event` and its application events are polled.  Everything
//! between the datagrams is quinn's: TLS 1.3 through rustls with the *ring*
//! provider, packet protection, loss detection, PTO, ACK policy, its pacer and its
//! congestion controller (congestion::Cubic or NewReno).
//!
//! Time.  quinn-proto never reads the clock on these paths: every call takes
//! `now: Instant`.  Stack time is `BASE + Duration::from_micros(now_us)`, with
//! `BASE = Instant::now()` read once per process (the only clock read, by this shim)
//! plus CCD_CONN_CLOCK_BASE_US.  Checked for quinn-proto 0.11.19 by grep over src/:
//! every `Instant::now()` is in a #[cfg(test)] module (connection/pacing.rs,
//! paths.rs, spaces.rs, mtud.rs, mod.rs:4139, congestion/cubic.rs) except
//! `QlogConfig::default()` (config/transport.rs:636, feature `qlog`): called only
//! for qlog=PATH, whose start_time this shim then sets to the virtual clock, so the
//! value read is never used.
//! `SystemTime::now()` is read only through `ServerConfig::time_source` (validation
//! tokens; bloom_token_log.rs:290/345 are tests): this shim sets it to the virtual
//! clock (UNIX_EPOCH + CCD_CONN_CLOCK_BASE_US + now), and rustls's `TimeProvider`
//! (session tickets) to the same clock.  quinn's timers are nanosecond `Instant`s:
//! ccd_conn_timeout returns the first virtual microsecond at or after one.
//!
//! Randomness.  `EndpointConfig::rng_seed` is derived from the run's seed and the
//! role: the endpoint's StdRng seeds each connection's (key-update interval,
//! skipped packet numbers, the spin bit, the greased transport parameter and the
//! order of transport parameters).  Connection IDs, the reset and token keys
//! (`rand::rng()`) and TLS secrets (ring's SystemRandom) come from the OS: their
//! values change from run to run, their sizes do not, so the datagrams' sizes and
//! times are the same.
//!
//! Configuration (both endpoints): initial_mtu = min_mtu = mds and MTU discovery
//! off, so full datagrams are exactly mds; stream and connection receive windows
//! 4 GiB (VarInt), send window 1 TiB; no idle timeout; ALPN "ccdiff"; the
//! controller from cc=cubic (CubicConfig::default, quinn's default) or cc=reno
//! (NewRenoConfig::default).  The server uses cert/key (PEM); the client checks the
//! server's handshake signature against the certificate it presents but not the
//! certificate itself (no CA: the test certificate is self-signed).
//!
//! State read (ccd_conn_stats): `Connection::stats()` (cwnd = path.cwnd, smoothed
//! and min RTT, sent_packets, lost_packets, congestion_events, udp_tx.bytes),
//! `congestion_state().metrics().ssthresh`, and three private fields through the
//! read-only accessors facade.py appends at build time (bytes in flight, the latest
//! RTT sample, whether any sample exists: before the first one quinn's smoothed RTT
//! is its configured initial RTT, reported as unknown).  `in_recovery` is quinn's
//! own rule (cubic.rs:102-107, new_reno.rs:52, RFC 9002 §7.3.2): the controller is
//! wrapped (the same Cubic/NewReno, every call forwarded) to see when a congestion
//! event moves its private `recovery_start_time` (read from its public derived
//! Debug, compared before/after the call, never recomputed); the period lasts until
//! a packet sent after that instant is acknowledged.  A move by Cubic's entry into
//! congestion avoidance (cubic.rs:118-128) starts an epoch, not a recovery.
//!
//! qlog=PATH: quinn-proto's own qlog writer (feature `qlog`, connection/qlog.rs,
//! the qlog crate 0.15: JSON-SEQ, `QlogStreamer` at EventImportance::Core), set on
//! the endpoint's TransportConfig through `qlog_stream` (`QlogConfig::into_stream`),
//! the way a quinn program turns it on.  Its times are milliseconds since
//! `QlogConfig::start_time`, set to the virtual instant the endpoint is created at;
//! every record's time is the `now` quinn was called with.  What quinn 0.11.19 logs:
//! packet_sent (packet number, type, header.length: the packet's size),
//! packet_received (number and type only: no frames, so no ACK ranges),
//! packet_lost (number, type, size, trigger) and recovery:metrics_updated (only the
//! fields that changed: congestion_window, bytes_in_flight, ssthresh, RTTs,
//! pto_count, packets_in_flight).  The file is written through a buffer, flushed at
//! every call's end; a write error fails the call (and the next ones).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr, CString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use quinn_proto::congestion::{
    Controller, ControllerFactory, ControllerMetrics, Cubic, CubicConfig, NewReno, NewRenoConfig,
};
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::rustls;
use quinn_proto::rustls::pki_types::pem::PemObject;
use quinn_proto::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ReadError, ReadableError, RttEstimator, ServerConfig, StreamEvent, StreamId,
    TimeSource, TransportConfig, VarInt, WriteError,
};

const CCD_CONN_ABI_VERSION: u32 = 1;
const CCD_CONN_CLOCK_BASE_US: u64 = 259_201_234_567;
const UNKNOWN: u64 = u64::MAX;
const NO_TIMER: u64 = u64::MAX;

const ALPN: &[u8] = b"ccdiff";
const SERVER_NAME: &str = "ccdiff.test";
const CLIENT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 50000);
const SERVER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 4433);
const OPTIONS: &str = "mds, cert, key, cc=cubic|reno, qlog=PATH";
/// QUIC's smallest allowed maximum datagram size (RFC 9000 §14).
const MIN_MDS: u64 = 1200;

/// The application's bytes: zeros, handed to quinn without a copy.
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
    format!("panic in quinn: {msg}")
}

// ---------------------------------------------------------------- time

/// The process's one clock read; every endpoint's stack time is relative to it.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| Instant::now() + Duration::from_micros(CCD_CONN_CLOCK_BASE_US))
}

fn at(us: u64) -> Instant {
    base() + Duration::from_micros(us)
}

/// An Instant as the first virtual microsecond at or after it.
fn micros_ceil(t: Instant) -> u64 {
    let d = t.saturating_duration_since(base());
    let us = d.as_micros();
    let us = if d.subsec_nanos() % 1000 != 0 { us + 1 } else { us };
    u64::try_from(us).unwrap_or(NO_TIMER - 1)
}

/// A time in the qlog as quinn's writer stamps its own records (qlog 0.15 streamer.rs:189-192:
/// milliseconds as f32 from its start_time), so the shim's records keep the file's order: an
/// exact "13639.175" after quinn's "13639.174" for the same instant read as time going back.
fn qlog_time(since_start_us: u64) -> f32 {
    Duration::from_micros(since_start_us).as_secs_f32() * 1000.0
}

/// One record of the shim's own in quinn's qlog (JSON-SEQ), marked `written_by` so the import
/// tells it from quinn's (qlog_dialects): `fields`, the data object's own members as JSON;
/// `read_from`, where in quinn the value was read.  A write error is kept by QlogFile and
/// fails the call (its check at the call's end).
fn shim_record(q: &mut QlogFile, time: &str, name: &str, fields: &str, read_from: Option<&str>) {
    let read = read_from.map(|r| format!(",\"read_from\":\"{r}\"")).unwrap_or_default();
    let record = format!("\x1e{{\"time\":{time},\"name\":\"{name}\",\"data\":{{{fields},\
                          \"written_by\":\"ccdiff connection shim\"{read}}}}}\n");
    let _ = q.write_all(record.as_bytes());
}

fn dur_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(UNKNOWN - 1)
}

/// The virtual time of the call in progress, for the wall-clock readers
/// (quinn's ServerConfig::time_source, rustls's TimeProvider).
#[derive(Debug, Default)]
struct VirtualClock(AtomicU64);

impl VirtualClock {
    fn set(&self, now_us: u64) {
        self.0.store(now_us, Ordering::Relaxed);
    }
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn system(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(CCD_CONN_CLOCK_BASE_US + self.0.load(Ordering::Relaxed))
    }
}

impl TimeSource for VirtualClock {
    fn now(&self) -> SystemTime {
        self.system()
    }
}

impl rustls::time_provider::TimeProvider for VirtualClock {
    fn current_time(&self) -> Option<UnixTime> {
        Some(UnixTime::since_unix_epoch(self.system().duration_since(UNIX_EPOCH).ok()?))
    }
}

// ---------------------------------------------------------------- controller

/// What the wrapped controller saw of its own recovery period.
#[derive(Debug, Default)]
struct Recovery {
    /// recovery_start_time set by the last effective congestion event, if the
    /// period has not ended yet.
    since: Option<Instant>,
}

#[derive(Clone)]
enum Cc {
    Cubic(Cubic),
    Reno(NewReno),
}

impl Cc {
    fn c(&mut self) -> &mut dyn Controller {
        match self {
            Cc::Cubic(c) => c,
            Cc::Reno(c) => c,
        }
    }
    fn r(&self) -> &dyn Controller {
        match self {
            Cc::Cubic(c) => c,
            Cc::Reno(c) => c,
        }
    }
    /// The private recovery_start_time's derived Debug (public API: cubic.rs:60,
    /// new_reno.rs:9), compared only for equality.
    fn recovery_start(&self) -> String {
        let text = match self {
            Cc::Cubic(c) => format!("{c:?}"),
            Cc::Reno(c) => format!("{c:?}"),
        };
        debug_field(&text, "recovery_start_time").unwrap_or_default().to_string()
    }
}

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
            },
            ',' if depth == 0 => return Some(&rest[..i]),
            _ => {},
        }
    }
    Some(rest)
}

/// quinn's own controller, every call forwarded unchanged.
struct Tracked {
    cc: Cc,
    recovery: Arc<Mutex<Recovery>>,
}

impl Controller for Tracked {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.cc.c().on_sent(now, bytes, last_packet_number)
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        {
            let mut r = self.recovery.lock().unwrap();
            if r.since.is_some_and(|t| sent > t) {
                r.since = None; // a packet sent after the period began is acknowledged
            }
        }
        self.cc.c().on_ack(now, sent, bytes, app_limited, rtt)
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, largest: Option<u64>) {
        self.cc.c().on_end_acks(now, in_flight, app_limited, largest)
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost_bytes: u64) {
        let before = self.cc.recovery_start();
        self.cc.c().on_congestion_event(now, sent, persistent, lost_bytes);
        let after = self.cc.recovery_start();
        if after != before {
            // Cubic's persistent congestion clears it (cubic.rs:200-203): no period.
            self.recovery.lock().unwrap().since = if after == "None" { None } else { Some(now) };
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.cc.c().on_mtu_update(new_mtu)
    }

    fn window(&self) -> u64 {
        self.cc.r().window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.cc.r().metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Tracked { cc: self.cc.clone(), recovery: self.recovery.clone() })
    }

    fn initial_window(&self) -> u64 {
        self.cc.r().initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        match self.cc {
            Cc::Cubic(c) => Box::new(c),
            Cc::Reno(c) => Box::new(c),
        }
    }
}

struct Factory {
    reno: bool,
    recovery: Arc<Mutex<Recovery>>,
}

impl ControllerFactory for Factory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let cc = if self.reno {
            Cc::Reno(NewReno::new(Arc::new(NewRenoConfig::default()), now, current_mtu))
        } else {
            Cc::Cubic(Cubic::new(Arc::new(CubicConfig::default()), now, current_mtu))
        };
        *self.recovery.lock().unwrap() = Recovery::default();
        Box::new(Tracked { cc, recovery: self.recovery.clone() })
    }
}

// ---------------------------------------------------------------- TLS

/// The client trusts the certificate the server presents (a self-signed test
/// certificate: no CA) but checks the handshake signature made with its key.
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

// ---------------------------------------------------------------- options

#[derive(Debug)]
struct Options {
    mds: u16,
    cert: Option<String>,
    key: Option<String>,
    reno: bool,
    qlog: Option<String>,
}

fn parse_options(text: &str) -> Result<Options, String> {
    let mut o = Options { mds: 1200, cert: None, key: None, reno: false, qlog: None };
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("option {item:?} is not key=value"))?;
        match k.trim() {
            "mds" => {
                let n: u64 = v.trim().parse().map_err(|_| format!("mds={v}: not a number"))?;
                if !(MIN_MDS..=65_527).contains(&n) {
                    return Err(format!("mds={n}: quinn needs {MIN_MDS}..=65527 (RFC 9000 §14)"));
                }
                o.mds = n as u16;
            },
            "cert" => o.cert = Some(v.trim().to_string()),
            "key" => o.key = Some(v.trim().to_string()),
            "cc" => {
                o.reno = match v.trim() {
                    "cubic" => false,
                    "reno" | "newreno" => true,
                    other => return Err(format!("cc={other}: quinn has cubic and reno")),
                }
            },
            "qlog" => {
                let path = v.trim();
                if path.is_empty() {
                    return Err("qlog=: no path".into());
                }
                o.qlog = Some(path.to_string());
            },
            other => return Err(format!("unknown option {other:?} (quinn takes {OPTIONS})")),
        }
    }
    Ok(o)
}

/// The qlog file: quinn's QlogStreamer writes through this; the shim keeps a second
/// handle to flush it at each call's end and to see a write error.
#[derive(Clone)]
struct QlogFile(Arc<Mutex<QlogFileState>>);

struct QlogFileState {
    out: BufWriter<File>,
    error: Option<String>,
}

impl QlogFile {
    fn create(path: &str) -> Result<QlogFile, String> {
        let f = File::create(path).map_err(|e| format!("qlog={path}: {e}"))?;
        Ok(QlogFile(Arc::new(Mutex::new(QlogFileState { out: BufWriter::new(f), error: None }))))
    }
    /// Flush; the first write or flush error, if any.
    fn check(&self) -> Result<(), String> {
        let mut st = self.0.lock().unwrap();
        if st.error.is_none() {
            if let Err(e) = st.out.flush() {
                st.error = Some(e.to_string());
            }
        }
        match &st.error {
            Some(e) => Err(format!("qlog: writing the file failed: {e}")),
            None => Ok(()),
        }
    }
}

impl Write for QlogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut st = self.0.lock().unwrap();
        let r = st.out.write(buf);
        if let Err(e) = &r {
            st.error.get_or_insert_with(|| e.to_string());
        }
        r
    }
    fn flush(&mut self) -> std::io::Result<()> {
        // quinn's streamer flushes after every event: the shim flushes once per call.
        Ok(())
    }
}

fn transport(o: &Options, factory: Arc<Factory>, qlog: Option<(&QlogFile, Instant, bool)>)
             -> Result<TransportConfig, String> {
    let mut t = TransportConfig::default();
    if let Some((file, start, server)) = qlog {
        let mut q = quinn_proto::QlogConfig::default();
        q.writer(Box::new(file.clone()))
            .title(Some("ccdiff connection mode".into()))
            .description(Some(format!("quinn-proto, the {}", if server { "server" } else { "client" })))
            .start_time(start);
        let stream = q.into_stream();
        file.check()?;
        t.qlog_stream(Some(stream.ok_or("qlog: quinn's QlogConfig::into_stream gave no stream")?));
    }
    t.initial_mtu(o.mds)
        .min_mtu(o.mds)
        .mtu_discovery_config(None)
        .stream_receive_window(VarInt::from_u64(1 << 32).unwrap())
        .receive_window(VarInt::MAX)
        .send_window(1 << 40)
        .max_idle_timeout(None)
        .keep_alive_interval(None)
        .enable_segmentation_offload(false)
        .congestion_controller_factory(factory);
    Ok(t)
}

fn rng_seed(seed: u64, server: bool) -> [u8; 32] {
    // splitmix64 over (seed, role): a different stream for client and server.
    let mut x = seed ^ if server { 0x5345_5256_4552_2121 } else { 0x434c_4945_4e54_2121 };
    let mut out = [0u8; 32];
    for chunk in out.chunks_mut(8) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out
}

// ---------------------------------------------------------------- the endpoint

struct Shim {
    server: bool,
    clock: Arc<VirtualClock>,
    endpoint: Endpoint,
    conn: Option<(ConnectionHandle, Connection)>,
    /// Datagrams the endpoint itself answered with (version negotiation, resets).
    responses: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    stream: Option<StreamId>,
    fin_sent: bool,
    read: u64,
    fin_read: bool,
    established: bool,
    lost: Option<String>,
    recovery: Arc<Mutex<Recovery>>,
    qlog: Option<QlogFile>,
    /// The virtual time the qlog's times count from (its start_time).
    qlog_start_us: u64,
    /// A datagram went out since the last app-limited mark, and that mark's value.
    loop_sent: bool,
    marked: Option<bool>,
    /// Which packet number spaces (Initial, Handshake, Data) had keys after the last call.
    had_keys: [bool; 3],
    last_error: CString,
}

impl Shim {
    fn new(server: bool, now_us: u64, seed: u64, options: &str) -> Result<Shim, String> {
        let o = parse_options(options)?;
        let clock = Arc::new(VirtualClock::default());
        clock.set(now_us);
        let recovery = Arc::new(Mutex::new(Recovery::default()));
        let factory = Arc::new(Factory { reno: o.reno, recovery: recovery.clone() });
        let qlog = o.qlog.as_deref().map(QlogFile::create).transpose()?;
        let transport = Arc::new(transport(&o, factory, qlog.as_ref().map(|f| (f, at(now_us), server)))?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let time: Arc<dyn rustls::time_provider::TimeProvider> = clock.clone();

        let mut endpoint_config = EndpointConfig::default();
        endpoint_config.rng_seed(Some(rng_seed(seed, server)));
        let endpoint_config = Arc::new(endpoint_config);

        let mut shim = Shim {
            server,
            clock: clock.clone(),
            endpoint: Endpoint::new(endpoint_config.clone(), None, false, None),
            conn: None,
            responses: VecDeque::new(),
            buf: Vec::with_capacity(usize::from(o.mds)),
            stream: None,
            fin_sent: false,
            read: 0,
            fin_read: false,
            established: false,
            lost: None,
            recovery,
            qlog,
            qlog_start_us: now_us,
            loop_sent: false,
            marked: None,
            had_keys: [false; 3],
            last_error: CString::default(),
        };
        shim.qlog_parameters(o.mds);
        if server {
            let cert = o.cert.as_deref().ok_or("the server needs cert=PATH")?;
            let key = o.key.as_deref().ok_or("the server needs key=PATH")?;
            let certs = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("cert={cert}: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("cert={cert}: {e}"))?;
            if certs.is_empty() {
                return Err(format!("cert={cert}: no certificate in it"));
            }
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("key={key}: {e}"))?;
            let mut tls = rustls::ServerConfig::builder_with_details(provider, time)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| format!("TLS 1.3: {e}"))?
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .map_err(|e| format!("cert/key: {e}"))?;
            tls.alpn_protocols = vec![ALPN.to_vec()];
            let crypto = QuicServerConfig::try_from(tls).map_err(|e| format!("QUIC TLS: {e}"))?;
            let mut sc = ServerConfig::with_crypto(Arc::new(crypto));
            sc.transport_config(transport).time_source(clock.clone());
            shim.endpoint = Endpoint::new(endpoint_config, Some(Arc::new(sc)), false, None);
        } else {
            let verifier = Arc::new(TrustPresented(provider.clone()));
            let mut tls = rustls::ClientConfig::builder_with_details(provider, time)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(|e| format!("TLS 1.3: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            tls.alpn_protocols = vec![ALPN.to_vec()];
            let crypto = QuicClientConfig::try_from(tls).map_err(|e| format!("QUIC TLS: {e}"))?;
            let mut cc = ClientConfig::new(Arc::new(crypto));
            cc.transport_config(transport);
            let conn = shim
                .endpoint
                .connect(at(now_us), cc, SERVER_ADDR, SERVER_NAME)
                .map_err(|e| format!("connect: {e}"))?;
            shim.conn = Some(conn);
            shim.pump();
        }
        if let Some(q) = &shim.qlog {
            q.check()?;
        }
        Ok(shim)
    }

    /// What quinn's qlog does not say and the import needs (as the ngtcp2 and aioquic shims
    /// log it): the datagram size its controllers count with (the path's MTU, here mds:
    /// Cubic and NewReno grow and floor by current_mtu) and its initial RTT (333 ms,
    /// TransportConfig::default).  Without it the import took 1,200 bytes: quinn's initial
    /// window is 12,000 whatever the size, so the first window does not tell it.
    fn qlog_parameters(&mut self, mds: u16) {
        if let Some(q) = self.qlog.as_mut() {
            shim_record(q, "0.0", "recovery:parameters_set", &format!("\"max_datagram_size\":{mds},\"initial_rtt\":333"),
                        None);
        }
    }

    fn enter(&mut self, now_us: u64) -> Instant {
        self.clock.set(now_us);
        at(now_us)
    }

    /// After every call into the connection: its endpoint events to the endpoint
    /// (and the answers back), then its application events.
    fn pump(&mut self) {
        self.mark_discarded_keys();
        let Some((ch, conn)) = self.conn.as_mut() else { return };
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(*ch, ev) {
                conn.handle_event(back);
            }
        }
        while let Some(ev) = conn.poll() {
            match ev {
                Event::Connected => self.established = true,
                Event::ConnectionLost { reason } => {
                    self.lost.get_or_insert_with(|| reason.to_string());
                },
                Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) if self.server => {
                    while let Some(id) = conn.streams().accept(Dir::Bi) {
                        self.stream.get_or_insert(id);
                    }
                },
                _ => {},
            }
        }
    }

    fn recv(&mut self, data: &[u8], now_us: u64) -> Result<(), String> {
        let now = self.enter(now_us);
        let from = if self.server { CLIENT_ADDR } else { SERVER_ADDR };
        self.buf.clear();
        match self.endpoint.handle(now, from, None, None, BytesMut::from(data), &mut self.buf) {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => match self.conn.as_mut() {
                Some((mine, conn)) if *mine == ch => conn.handle_event(ev),
                _ => return Err(format!("quinn routed a datagram to unknown connection {ch:?}")),
            },
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.conn.is_some() {
                    self.endpoint.ignore(incoming);
                } else {
                    self.buf.clear();
                    match self.endpoint.accept(incoming, now, &mut self.buf, None) {
                        Ok(conn) => self.conn = Some(conn),
                        Err(e) => {
                            if let Some(t) = e.response {
                                self.responses.push_back(self.buf[..t.size].to_vec());
                            }
                            return Err(format!("accept: {}", e.cause));
                        },
                    }
                }
            },
            Some(DatagramEvent::Response(t)) => self.responses.push_back(self.buf[..t.size].to_vec()),
            None => {},
        }
        self.pump();
        Ok(())
    }

    fn send(&mut self, out: &mut [u8], now_us: u64) -> Result<usize, String> {
        let now = self.enter(now_us);
        let datagram = if let Some(d) = self.responses.pop_front() {
            d
        } else {
            let Some((_, conn)) = self.conn.as_mut() else { return Ok(0) };
            self.buf.clear();
            let t = conn.poll_transmit(now, 1, &mut self.buf);
            self.pump();
            match t {
                None => {
                    self.mark_app_limited(now_us);
                    return Ok(0);
                },
                Some(t) => {
                    self.loop_sent = true;
                    if t.segment_size.is_some_and(|s| s != t.size) {
                        return Err(format!("quinn sent {} bytes in segments of {:?} with GSO off",
                                           t.size, t.segment_size));
                    }
                    self.buf[..t.size].to_vec()
                },
            }
        };
        if datagram.len() > out.len() {
            return Err(format!("a {}-byte datagram does not fit the {}-byte buffer", datagram.len(), out.len()));
        }
        out[..datagram.len()].copy_from_slice(&datagram);
        Ok(datagram.len())
    }

    /// quinn's `Connection.app_limited` where a send loop ends (the poll_transmit that
    /// returns nothing sets it: `buf.is_empty() && !congestion_blocked`, mod.rs:947): it
    /// decides whether the next ACKs grow the window (cubic.rs:102-109, new_reno.rs:52-54),
    /// and quinn's qlog does not carry it.  Written to the qlog as a record of the shim's
    /// own (`ccdiff:app_limited`, marked `written_by`) after a loop that sent something or
    /// that changed it; the import turns it into the trace's app-limited marks and
    /// app_idle / app_data (qlog_dialects.ShimAppLimited).  Read through the facade's
    /// accessor; nothing of quinn's changes.
    fn mark_app_limited(&mut self, now_us: u64) {
        let (Some(q), Some((_, conn))) = (self.qlog.as_mut(), self.conn.as_ref()) else { return };
        let value = conn.ccdiff_app_limited();
        if !self.loop_sent && self.marked == Some(value) {
            return;
        }
        self.loop_sent = false;
        self.marked = Some(value);
        let t = qlog_time(now_us.saturating_sub(self.qlog_start_us));
        shim_record(q, &t.to_string(), "ccdiff:app_limited", &format!("\"app_limited\":{value}"),
                    Some("quinn-proto Connection.app_limited (src/connection/mod.rs:947)"));
    }

    /// quinn drops a space's keys and with them its packets in flight, without a congestion
    /// event (discard_space, mod.rs:2210-2228; RFC 9002 §6.4) and without a qlog record: a
    /// packet that left flight so would be read as acknowledged.  Written to the qlog as a
    /// record of the shim's own (`ccdiff:keys_discarded`, marked `written_by`) when a space
    /// that had keys has none after a call; the import files it before the datagram that
    /// caused it (qlog_dialects.ShimKeys).
    fn mark_discarded_keys(&mut self) {
        let (Some(q), Some((_, conn))) = (self.qlog.as_mut(), self.conn.as_ref()) else { return };
        let now = conn.ccdiff_has_keys();
        for (space, name) in ["initial", "handshake"].iter().enumerate() {
            if self.had_keys[space] && !now[space] {
                let t = qlog_time(self.clock.now_us().saturating_sub(self.qlog_start_us));
                shim_record(q, &t.to_string(), "ccdiff:keys_discarded", &format!("\"space\":\"{name}\""),
                            Some("quinn-proto PacketSpace.crypto (src/connection/mod.rs:2210-2228)"));
            }
        }
        self.had_keys = now;
    }

    fn timeout(&mut self) -> u64 {
        match self.conn.as_mut().and_then(|(_, c)| c.poll_timeout()) {
            Some(t) => micros_ceil(t),
            None => NO_TIMER,
        }
    }

    fn on_timeout(&mut self, now_us: u64) {
        let now = self.enter(now_us);
        if let Some((_, conn)) = self.conn.as_mut() {
            conn.handle_timeout(now);
        }
        self.pump();
    }

    fn write(&mut self, len: u64, fin: bool, now_us: u64) -> Result<u64, String> {
        self.enter(now_us);
        if self.server {
            return Err("the server does not write (the client is the data sender)".into());
        }
        if self.fin_sent {
            return if len == 0 { Ok(0) } else { Err("write after the stream's end".into()) };
        }
        let Some((_, conn)) = self.conn.as_mut() else { return Ok(0) };
        if conn.is_closed() {
            return Ok(0);
        }
        let id = match self.stream {
            Some(id) => id,
            None => match conn.streams().open(Dir::Bi) {
                Some(id) => *self.stream.insert(id),
                None => return Ok(0), // the server's stream limit is not known yet
            },
        };
        let mut send = conn.send_stream(id);
        let mut accepted = 0u64;
        while accepted < len {
            let n = (len - accepted).min(ZEROS.len() as u64) as usize;
            let mut chunk = [Bytes::from_static(&ZEROS[..n])];
            match send.write_chunks(&mut chunk) {
                Ok(w) => {
                    accepted += w.bytes as u64;
                    if w.bytes < n {
                        break;
                    }
                },
                Err(WriteError::Blocked) => break,
                Err(e) => return Err(format!("stream write: {e}")),
            }
        }
        if fin && accepted == len {
            send.finish().map_err(|e| format!("stream finish: {e}"))?;
            self.fin_sent = true;
        }
        self.pump();
        Ok(accepted)
    }

    fn read(&mut self, now_us: u64) -> Result<u64, String> {
        self.enter(now_us);
        let Some((_, conn)) = self.conn.as_mut() else { return Ok(self.read) };
        if self.stream.is_none() && self.server {
            self.stream = conn.streams().accept(Dir::Bi);
        }
        let (Some(id), false) = (self.stream, self.fin_read) else { return Ok(self.read) };
        match conn.recv_stream(id).read(true) {
            Ok(mut chunks) => {
                let mut result = Ok(());
                loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(chunk)) => self.read += chunk.bytes.len() as u64,
                        Ok(None) => {
                            self.fin_read = true;
                            break;
                        },
                        Err(ReadError::Blocked) => break,
                        Err(e) => {
                            result = Err(format!("stream read: {e}"));
                            break;
                        },
                    }
                }
                let _ = chunks.finalize();
                result?;
            },
            Err(ReadableError::ClosedStream) => {},
            Err(e) => return Err(format!("stream read: {e}")),
        }
        self.pump();
        Ok(self.read)
    }

    fn stats(&self) -> CcdConnStats {
        let mut s = CcdConnStats {
            cwnd: UNKNOWN,
            bytes_in_flight: UNKNOWN,
            ssthresh: UNKNOWN,
            smoothed_rtt_us: UNKNOWN,
            min_rtt_us: UNKNOWN,
            latest_rtt_us: UNKNOWN,
            packets_sent: 0,
            packets_lost: 0,
            bytes_sent: 0,
            congestion_events: 0,
            in_recovery: 0,
            stream_bytes_read: self.read,
            stream_fin_read: self.fin_read as u64,
            established: self.established as u64,
            closed: self.lost.is_some() as u64,
        };
        let Some((_, conn)) = self.conn.as_ref() else { return s };
        let st = conn.stats();
        s.cwnd = st.path.cwnd;
        s.bytes_in_flight = conn.ccdiff_bytes_in_flight();
        s.ssthresh = conn.congestion_state().metrics().ssthresh.unwrap_or(UNKNOWN);
        let rtt = conn.ccdiff_rtt();
        if let Some(smoothed) = rtt.ccdiff_smoothed() {
            s.smoothed_rtt_us = dur_us(smoothed);
            s.min_rtt_us = dur_us(rtt.min());
            s.latest_rtt_us = dur_us(rtt.ccdiff_latest());
        }
        s.packets_sent = st.path.sent_packets;
        s.packets_lost = st.path.lost_packets;
        s.bytes_sent = st.udp_tx.bytes;
        s.congestion_events = st.path.congestion_events;
        s.in_recovery = self.recovery.lock().unwrap().since.is_some() as u64;
        s.closed = (self.lost.is_some() || conn.is_closed() || conn.is_drained()) as u64;
        s
    }
}

// ---------------------------------------------------------------- C ABI

fn write_err(err: *mut c_char, err_len: usize, msg: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let line = msg.replace('\n', " ");
    let bytes = line.as_bytes();
    let mut n = bytes.len().min(err_len - 1);
    while n > 0 && !line.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller gives err_len writable bytes at err.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

fn shim<'a>(conn: *mut c_void) -> Option<&'a mut Shim> {
    // SAFETY: a handle from ccd_conn_new, not yet freed (the contract).
    unsafe { (conn as *mut Shim).as_mut() }
}

/// Run `f` on the endpoint, catching panics; an Err or a panic is kept as the last error.
fn call<T>(conn: *mut c_void, fail: T, f: impl FnOnce(&mut Shim) -> Result<T, String>) -> T {
    install_panic_hook();
    let Some(s) = shim(conn) else { return fail };
    let r = catch_unwind(AssertUnwindSafe(|| f(&mut *s))).unwrap_or_else(|_| Err(panic_message()));
    // The qlog written during the call, flushed; a write error fails the call.
    let r = match (r, s.qlog.as_ref().map(QlogFile::check)) {
        (Ok(_), Some(Err(e))) => Err(e),
        (r, _) => r,
    };
    match r {
        Ok(v) => v,
        Err(e) => {
            s.last_error = CString::new(e.replace('\0', " ")).unwrap_or_default();
            fail
        },
    }
}

#[no_mangle]
pub extern "C" fn ccd_conn_abi_version() -> u32 {
    CCD_CONN_ABI_VERSION
}

#[no_mangle]
pub extern "C" fn ccd_conn_new(
    is_server: i32,
    now_us: u64,
    seed: u64,
    options: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    install_panic_hook();
    let r = catch_unwind(|| {
        let opts = if options.is_null() {
            ""
        } else {
            // SAFETY: a NUL-terminated string (the contract).
            unsafe { CStr::from_ptr(options) }.to_str().map_err(|_| "options are not UTF-8".to_string())?
        };
        Shim::new(is_server != 0, now_us, seed, opts)
    })
    .unwrap_or_else(|_| Err(panic_message()));
    match r {
        Ok(s) => Box::into_raw(Box::new(s)) as *mut c_void,
        Err(e) => {
            write_err(err, err_len, &format!("quinn: {e}"));
            std::ptr::null_mut()
        },
    }
}

#[no_mangle]
pub extern "C" fn ccd_conn_free(conn: *mut c_void) {
    if conn.is_null() {
        return;
    }
    install_panic_hook();
    // SAFETY: a handle from ccd_conn_new, freed once.
    let b = unsafe { Box::from_raw(conn as *mut Shim) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(b)));
}

#[no_mangle]
pub extern "C" fn ccd_conn_recv(conn: *mut c_void, data: *const u8, len: usize, now_us: u64) -> i32 {
    call(conn, -1, |s| {
        let data = if len == 0 {
            &[][..]
        } else if data.is_null() {
            return Err("recv: NULL data".into());
        } else {
            // SAFETY: len readable bytes at data (the contract).
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        s.recv(data, now_us).map(|()| 0)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_send(
    conn: *mut c_void,
    buf: *mut u8,
    cap: usize,
    now_us: u64,
    send_at_us: *mut u64,
) -> i64 {
    call(conn, -1, |s| {
        if buf.is_null() && cap > 0 {
            return Err("send: NULL buffer".into());
        }
        let out = if cap == 0 {
            &mut [][..]
        } else {
            // SAFETY: cap writable bytes at buf (the contract).
            unsafe { std::slice::from_raw_parts_mut(buf, cap) }
        };
        let n = s.send(out, now_us)?;
        if !send_at_us.is_null() {
            // quinn paces inside poll_transmit (nothing while paced; poll_timeout
            // covers the pacer), so what it returns is due now.
            // SAFETY: a writable u64 (the contract).
            unsafe { *send_at_us = now_us };
        }
        Ok(n as i64)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_timeout(conn: *mut c_void, now_us: u64) -> u64 {
    call(conn, NO_TIMER, |s| {
        s.clock.set(now_us);
        Ok(s.timeout())
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_on_timeout(conn: *mut c_void, now_us: u64) -> i32 {
    call(conn, -1, |s| {
        s.on_timeout(now_us);
        Ok(0)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_write(conn: *mut c_void, len: u64, fin: i32, now_us: u64) -> i64 {
    call(conn, -1, |s| {
        let n = s.write(len, fin != 0, now_us)?;
        i64::try_from(n).map_err(|_| "write: too many bytes".to_string())
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_read(conn: *mut c_void, now_us: u64) -> i64 {
    call(conn, -1, |s| {
        let n = s.read(now_us)?;
        i64::try_from(n).map_err(|_| "read: too many bytes".to_string())
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_stats(conn: *mut c_void, out: *mut CcdConnStats) -> i32 {
    call(conn, -1, |s| {
        if out.is_null() {
            return Err("stats: NULL out".into());
        }
        let st = s.stats();
        // SAFETY: a writable ccd_conn_stats (the contract).
        unsafe { out.write(st) };
        Ok(0)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_last_error(conn: *mut c_void) -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    match shim(conn) {
        Some(s) => s.last_error.as_ptr(),
        None => EMPTY.as_ptr() as *const c_char,
    }
}
