//! ccdiff connection shim for quiche (implementations/include/ccdiff_connection.h, ABI 1).
//!
//! One endpoint is one `quiche::Connection` (client: `quiche::connect`, server:
//! `quiche::accept`), with quiche's own TLS (BoringSSL), loss detection, PTO,
//! pacing and congestion controller.  quiche reads its clock itself; the build
//! rewrites every read to `quiche::ccdiff_clock::now()` (patches/clock.py), and
//! every call here first sets that clock to the harness's virtual time and
//! swaps in the endpoint's own random stream (quiche's packet-number skips,
//! path challenges and the client's initial DCID are drawn from it), so a run
//! is a function of its seed.  Connection IDs are derived from the seed too.
//!
//! Every extern fn catches panics: the call returns -1 / NULL with the panic's
//! message (ccd_conn_last_error, or `err` for ccd_conn_new).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use quiche::ccdiff_clock as clock;

const ABI_VERSION: u32 = 1;
const UNKNOWN: u64 = u64::MAX;
const NO_TIMER: u64 = u64::MAX;
const ALPN: &[u8] = b"ccdiff";
const SERVER_NAME: &str = "ccdiff.test";
/// Flow control never limits the sender (the contract asks >= 1 GiB).
const FLOW_WINDOW: u64 = 1 << 32;
/// The client's data stream: its first bidirectional stream.
const STREAM: u64 = 0;
const OPTIONS: &str = "mds=N, cert=PATH, key=PATH, cc=cubic|reno, idle_fix=on|off, \
                       hystart=on|off, pacing=on|off, qlog=PATH";

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
    let msg = PANIC_MSG.with(|m| m.borrow_mut().take()).unwrap_or_else(|| "unknown".into());
    format!("panic in quiche: {msg}")
}

fn one_line(s: &str) -> CString {
    CString::new(s.replace(['\n', '\0'], " ")).unwrap_or_default()
}

pub struct Endpoint {
    conn: quiche::Connection,
    is_server: bool,
    local: SocketAddr,
    peer: SocketAddr,
    /// The endpoint's quiche random stream (clock::rng_state while in a call).
    rng: u64,
    buf: Vec<u8>,
    zeros: Vec<u8>,
    read_total: u64,
    fin_read: bool,
    last_error: CString,
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Options {
    mds: Option<usize>,
    cert: Option<String>,
    key: Option<String>,
    reno: bool,
    idle_fix: Option<bool>,
    hystart: Option<bool>,
    pacing: Option<bool>,
    qlog: Option<String>,
}

fn on_off(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("option {key}={v}: expected on or off")),
    }
}

fn parse_options(s: &str) -> Result<Options, String> {
    let mut o = Options {
        mds: None,
        cert: None,
        key: None,
        reno: false,
        idle_fix: None,
        hystart: None,
        pacing: None,
        qlog: None,
    };
    for item in s.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("option {item:?} is not key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        match k {
            "mds" => {
                let n: usize = v.parse().map_err(|_| format!("option mds={v}: not a number"))?;
                if !(1200..=65527).contains(&n) {
                    return Err(format!("option mds={v}: quiche needs 1200..=65527"));
                }
                o.mds = Some(n);
            },
            "cert" => o.cert = Some(v.to_string()),
            "key" => o.key = Some(v.to_string()),
            "cc" => {
                o.reno = match v {
                    "cubic" => false,
                    "reno" => true,
                    _ => return Err(format!("option cc={v}: quiche's shim has cubic and reno")),
                }
            },
            "idle_fix" => o.idle_fix = Some(on_off(k, v)?),
            "hystart" => o.hystart = Some(on_off(k, v)?),
            "pacing" => o.pacing = Some(on_off(k, v)?),
            "qlog" => o.qlog = Some(v.to_string()),
            _ => return Err(format!("unknown option {k:?} (quiche accepts {OPTIONS})")),
        }
    }
    Ok(o)
}

fn config(o: &Options, is_server: bool) -> Result<quiche::Config, String> {
    let e = |what: &str, err: quiche::Error| format!("{what}: {err:?}");
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(|x| e("Config::new", x))?;
    if is_server {
        let cert = o.cert.as_deref().ok_or("the server needs cert=PATH")?;
        let key = o.key.as_deref().ok_or("the server needs key=PATH")?;
        c.load_cert_chain_from_pem_file(cert)
            .map_err(|x| e(&format!("cert={cert}"), x))?;
        c.load_priv_key_from_pem_file(key).map_err(|x| e(&format!("key={key}"), x))?;
    }
    c.verify_peer(false);
    if !clock::verify_ed25519(&mut c) {
        return Err("SSL_CTX_set_verify_algorithm_prefs (Ed25519) failed".into());
    }
    c.set_application_protos(&[ALPN]).map_err(|x| e("ALPN", x))?;
    if let Some(mds) = o.mds {
        c.set_max_send_udp_payload_size(mds);
    }
    c.discover_pmtu(false);
    c.set_initial_max_data(FLOW_WINDOW);
    c.set_initial_max_stream_data_bidi_local(FLOW_WINDOW);
    c.set_initial_max_stream_data_bidi_remote(FLOW_WINDOW);
    c.set_initial_max_stream_data_uni(FLOW_WINDOW);
    c.set_initial_max_streams_bidi(16);
    c.set_initial_max_streams_uni(16);
    c.set_max_connection_window(FLOW_WINDOW);
    c.set_max_stream_window(FLOW_WINDOW);
    c.set_max_idle_timeout(0); // 0: no idle timeout
    c.set_cc_algorithm(if o.reno {
        quiche::CongestionControlAlgorithm::Reno
    } else {
        quiche::CongestionControlAlgorithm::CUBIC
    });
    if let Some(on) = o.hystart {
        c.enable_hystart(on);
    }
    if let Some(on) = o.pacing {
        c.enable_pacing(on);
    }
    if let Some(on) = o.idle_fix {
        // quiche >= 0.28: Config::set_enable_cubic_idle_restart_fix; before, the
        // behaviour is built in (0.26.0: no fix, 0.26.1: the fix).
        if !clock::set_idle_restart_fix(&mut c, on) {
            return Err(format!(
                "option idle_fix={}: this quiche has no such switch (the CUBIC idle-restart fix is \
                 built in {}); only idle_fix={} is accepted",
                if on { "on" } else { "off" },
                if clock::IDLE_FIX_BUILTIN { "on" } else { "off" },
                if clock::IDLE_FIX_BUILTIN { "on" } else { "off" },
            ));
        }
    }
    Ok(c)
}

fn new_endpoint(is_server: bool, now_us: u64, seed: u64, options: &str) -> Result<Endpoint, String> {
    let o = parse_options(options)?;
    let mut cfg = config(&o, is_server)?;
    let mut s = seed ^ if is_server { 0x5345_5256_4552_0000 } else { 0x434c_4945_4e54_0000 };
    let mut scid = [0u8; quiche::MAX_CONN_ID_LEN];
    for chunk in scid.chunks_mut(8) {
        chunk.copy_from_slice(&splitmix(&mut s).to_le_bytes()[..chunk.len()]);
    }
    let rng = splitmix(&mut s) | 1;
    let client: SocketAddr = "192.0.2.1:4433".parse().unwrap();
    let server: SocketAddr = "192.0.2.2:443".parse().unwrap();
    let (local, peer) = if is_server { (server, client) } else { (client, server) };
    clock::set_now_us(now_us);
    clock::set_rng_state(rng);
    let scid = quiche::ConnectionId::from_ref(&scid);
    let conn = if is_server {
        quiche::accept(&scid, None, local, peer, &mut cfg)
    } else {
        quiche::connect(Some(SERVER_NAME), &scid, local, peer, &mut cfg)
    }
    .map_err(|e| format!("quiche::{}: {e:?}", if is_server { "accept" } else { "connect" }))?;
    let mut conn = conn;
    if let Some(path) = &o.qlog {
        // JSON-SEQ, quiche's own events (QlogLevel::Base), times relative to now_us.
        let file = std::fs::File::create(path).map_err(|e| format!("qlog={path}: {e}"))?;
        let role = if is_server { "server" } else { "client" };
        conn.set_qlog(
            Box::new(std::io::BufWriter::new(file)),
            format!("ccdiff connection mode: quiche {role}"),
            format!("seed {seed}; virtual time (the qlog's reference_time is the wall clock)"),
        );
    }
    Ok(Endpoint {
        conn,
        is_server,
        local,
        peer,
        rng: clock::rng_state(),
        buf: vec![0; 65_536],
        zeros: vec![0; 1 << 20],
        read_total: 0,
        fin_read: false,
        last_error: CString::default(),
    })
}

/// Runs `f` on the endpoint at virtual time `now_us`, with its random stream;
/// an Err or a panic becomes `fail` and the endpoint's last error.
fn call<T>(h: *mut Endpoint, now_us: u64, fail: T, f: impl FnOnce(&mut Endpoint) -> Result<T, String>) -> T {
    if h.is_null() {
        return fail;
    }
    install_panic_hook();
    // SAFETY: h came from ccd_conn_new and was not freed (the contract).
    let ep = unsafe { &mut *h };
    clock::set_now_us(now_us);
    clock::set_rng_state(ep.rng);
    let r = catch_unwind(AssertUnwindSafe(|| f(&mut *ep)));
    ep.rng = clock::rng_state();
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => {
            ep.last_error = one_line(&msg);
            fail
        },
        Err(_) => {
            ep.last_error = one_line(&panic_message());
            fail
        },
    }
}

#[no_mangle]
pub extern "C" fn ccd_conn_abi_version() -> u32 {
    ABI_VERSION
}

/// # Safety
/// `options` is NUL-terminated or NULL; `err` has room for `err_len` bytes or is NULL.
#[no_mangle]
pub unsafe extern "C" fn ccd_conn_new(
    is_server: c_int, now_us: u64, seed: u64, options: *const c_char, err: *mut c_char, err_len: usize,
) -> *mut Endpoint {
    install_panic_hook();
    let opts = if options.is_null() {
        String::new()
    } else {
        CStr::from_ptr(options).to_string_lossy().into_owned()
    };
    let r = catch_unwind(|| new_endpoint(is_server != 0, now_us, seed, &opts))
        .unwrap_or_else(|_| Err(panic_message()));
    match r {
        Ok(ep) => Box::into_raw(Box::new(ep)),
        Err(msg) => {
            if !err.is_null() && err_len > 0 {
                let msg = one_line(&msg);
                let b = msg.as_bytes();
                let n = b.len().min(err_len - 1);
                std::ptr::copy_nonoverlapping(b.as_ptr(), err as *mut u8, n);
                *err.add(n) = 0;
            }
            std::ptr::null_mut()
        },
    }
}

/// # Safety
/// `conn` came from ccd_conn_new (or is NULL) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ccd_conn_free(conn: *mut Endpoint) {
    if !conn.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(conn))));
    }
}

/// # Safety
/// `data` points at `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ccd_conn_recv(conn: *mut Endpoint, data: *const u8, len: usize, now_us: u64) -> c_int {
    let data = if len == 0 { &[][..] } else { std::slice::from_raw_parts(data, len) };
    call(conn, now_us, -1, |ep| {
        let mut pkt = data.to_vec();
        let info = quiche::RecvInfo { from: ep.peer, to: ep.local };
        match ep.conn.recv(&mut pkt, info) {
            Ok(_) | Err(quiche::Error::Done) => Ok(0),
            // quiche drops what it cannot use and says so; fatal only when the
            // connection is closing because of it.
            Err(e) if ep.conn.is_closed() || ep.conn.local_error().is_some() => {
                Err(format!("recv: {e:?}; local error {:?}", ep.conn.local_error()))
            },
            Err(_) => Ok(0),
        }
    })
}

/// # Safety
/// `buf` has room for `cap` bytes; `send_at_us` is writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn ccd_conn_send(
    conn: *mut Endpoint, buf: *mut u8, cap: usize, now_us: u64, send_at_us: *mut u64,
) -> i64 {
    call(conn, now_us, -1, |ep| {
        let n = cap.min(ep.buf.len());
        match ep.conn.send(&mut ep.buf[..n]) {
            Ok((len, info)) => {
                std::ptr::copy_nonoverlapping(ep.buf.as_ptr(), buf, len);
                if !send_at_us.is_null() {
                    *send_at_us = clock::us_of(info.at).max(now_us);
                }
                Ok(len as i64)
            },
            Err(quiche::Error::Done) => Ok(0),
            Err(e) => Err(format!("send: {e:?}")),
        }
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_timeout(conn: *mut Endpoint, now_us: u64) -> u64 {
    call(conn, now_us, NO_TIMER, |ep| {
        Ok(match ep.conn.timeout_instant() {
            Some(t) => clock::us_of(t),
            None => NO_TIMER,
        })
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_on_timeout(conn: *mut Endpoint, now_us: u64) -> c_int {
    call(conn, now_us, -1, |ep| {
        ep.conn.on_timeout();
        Ok(0)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_write(conn: *mut Endpoint, len: u64, fin: c_int, now_us: u64) -> i64 {
    call(conn, now_us, -1, |ep| {
        if ep.is_server {
            return Err("ccd_conn_write: the server does not write (the client is the sender)".into());
        }
        let mut left = len;
        let mut accepted = 0u64;
        loop {
            let n = left.min(ep.zeros.len() as u64);
            let last = n == left;
            let r = ep.conn.stream_send(STREAM, &ep.zeros[..n as usize], fin != 0 && last);
            match r {
                Ok(w) => {
                    accepted += w as u64;
                    left -= w as u64;
                    if (w as u64) < n || last {
                        break;
                    }
                },
                // No send capacity now (congestion window, or the peer's stream
                // limit before the handshake): offered again after the next event.
                Err(quiche::Error::Done) | Err(quiche::Error::StreamLimit) => break,
                Err(e) => return Err(format!("stream_send: {e:?}")),
            }
        }
        Ok(accepted as i64)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_read(conn: *mut Endpoint, now_us: u64) -> i64 {
    call(conn, now_us, -1, |ep| {
        let ids: Vec<u64> = ep.conn.readable().collect();
        for id in ids {
            loop {
                match ep.conn.stream_recv(id, &mut ep.buf) {
                    Ok((n, fin)) => {
                        ep.read_total += n as u64;
                        ep.fin_read |= fin;
                    },
                    Err(quiche::Error::Done) => break,
                    Err(e) => return Err(format!("stream_recv({id}): {e:?}")),
                }
            }
        }
        Ok(ep.read_total as i64)
    })
}

#[repr(C)]
pub struct Stats {
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

/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ccd_conn_stats(conn: *mut Endpoint, out: *mut Stats) -> c_int {
    if out.is_null() {
        return -1;
    }
    let now = if conn.is_null() { 0 } else { clock::now_us() };
    call(conn, now, -1, |ep| {
        let c = &ep.conn;
        let s = c.stats();
        let p = c.path_stats().find(|p| p.active);
        let us = |d: std::time::Duration| d.as_micros() as u64;
        *out = Stats {
            cwnd: p.as_ref().map_or(UNKNOWN, |p| p.cwnd as u64),
            bytes_in_flight: clock::bytes_in_flight(c).map_or(UNKNOWN, |b| b as u64),
            ssthresh: UNKNOWN,
            smoothed_rtt_us: p.as_ref().map_or(UNKNOWN, |p| us(p.rtt)),
            min_rtt_us: p.as_ref().and_then(|p| p.min_rtt).map_or(UNKNOWN, us),
            latest_rtt_us: UNKNOWN,
            packets_sent: s.sent as u64,
            packets_lost: s.lost as u64,
            bytes_sent: s.sent_bytes,
            congestion_events: UNKNOWN,
            in_recovery: UNKNOWN,
            stream_bytes_read: if ep.is_server { ep.read_total } else { 0 },
            stream_fin_read: u64::from(ep.fin_read),
            established: u64::from(c.is_established()),
            closed: u64::from(c.is_closed() || c.is_draining()),
        };
        Ok(0)
    })
}

#[no_mangle]
pub extern "C" fn ccd_conn_last_error(conn: *mut Endpoint) -> *const c_char {
    static EMPTY: &CStr = c"";
    if conn.is_null() {
        return EMPTY.as_ptr();
    }
    // SAFETY: conn came from ccd_conn_new; the string lives until the next call.
    unsafe { (*conn).last_error.as_ptr() }
}
