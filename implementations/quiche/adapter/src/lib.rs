//! ccdiff adapter for quiche's congestion controller (CUBIC or Reno of the
//! legacy `recovery/congestion/` module, the one `LegacyRecovery` drives).
//!
//! The hooks are reached through `quiche::ccdiff_internal`, a forwarding
//! facade added at build time (../patches/).  This file calls them in the
//! order quiche's `LegacyRecovery` (src/recovery/congestion/recovery.rs) and
//! `Connection` (src/lib.rs) do.  Line references are to quiche 0.30.0
//! unless marked otherwise; 0.26.0 has the same code a few lines earlier.
//!
//! Virtual time: trace time t is `base + Duration::from_micros(t)`, with
//! `base` the `Instant` at `ccd_open` plus the harness's `clock_base_us`
//! (ccdiff_adapter.h: every adapter puts trace time 0 that far into a
//! monotonic clock).  quiche's `Instant` is opaque, so quiche sees only
//! differences; the base is applied for the one rule all stacks share.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use quiche::ccdiff_internal as q;

const CCD_ABI_VERSION: u32 = 4;
// ccdiff_adapter.h CCD_MAX_CLOCK_BASE_US: ten years of uptime.
const CCD_MAX_CLOCK_BASE_US: i64 = 315_360_000_000_000;
const CCD_NONE: u64 = u64::MAX;
const CCD_NO_TIME: i64 = i64::MIN;

const CCD_SENT: u32 = 1;
const CCD_ACKED: u32 = 2;
const CCD_LOST: u32 = 3;
const CCD_PERSISTENT_CONGESTION: u32 = 4;
const CCD_APP_IDLE: u32 = 5;
const CCD_APP_DATA: u32 = 6;

const CCD_PHASE_SLOW_START: u32 = 1;
const CCD_PHASE_CONGESTION_AVOIDANCE: u32 = 2;
const CCD_PHASE_RECOVERY: u32 = 3;

#[repr(C)]
pub struct CcdPacket {
    pn: u64,
    sent_us: i64,
    bytes: u32,
    app_limited: u32,
}

#[repr(C)]
pub struct CcdRtt {
    latest_us: i64,
    smoothed_us: i64,
    rttvar_us: i64,
    min_us: i64,
}

#[repr(C)]
pub struct CcdEvent {
    kind: u32,
    flags: u32,
    now_us: i64,
    bytes_in_flight: u64,
    packets: *const CcdPacket,
    n_packets: u32,
    n_spurious: u32,
    spurious: *const CcdPacket,
    ack_delay_us: i64,
    rtt: CcdRtt,
}

#[repr(C)]
pub struct CcdSnapshot {
    cwnd: u64,
    ssthresh: u64,
    bytes_in_flight: u64,
    phase: u32,
    reserved: u32,
    recovery_start_us: i64,
    epoch_start_us: i64,
    w_max_bytes: f64,
    k_us: f64,
}

#[repr(C)]
pub struct CcdConfig {
    max_datagram_size: u32,
    max_ack_delay_us: u32,
    initial_rtt_us: i64,
    options: *const c_char,
    clock_base_us: i64,
}

/// How quiche's `Congestion.app_limited` flag is driven (it gates all cwnd
/// growth in cubic.rs/reno.rs on_packet_acked).
#[derive(Clone, Copy, PartialEq)]
enum AppLimited {
    /// As a quiche `Connection`: on_packet_sent sets it to
    /// `bytes_in_flight + sent < cwnd` (congestion/mod.rs:201 in 0.30.0, 196 in
    /// 0.26.0), and the application's loop of `send()` calls ends in one of two
    /// ways.  With data still to send it ends on a full window, in
    /// `update_app_limited(false)` (lib.rs:4517/4524; 0.26.0: 4245/4252).  With
    /// nothing to send, `write_pkt_type` returns Done (lib.rs:8325; 0.26.0:
    /// 7824) before send_single reaches any `update_app_limited`, so the flag
    /// stays as the last on_packet_sent set it: ACKs of a connection that ran out of data with the window open do not
    /// grow it.  (lib.rs:5377's clear is reached only when write_pkt_type found
    /// something to send and no frame could be written.)  ACKs are processed in
    /// `recv()`, between send loops.  So: a packet sent cwnd-limited (its trace
    /// flag false, no `app_idle` since the last `app_data`) clears the flag, as
    /// the full window that ends its loop does; an app-limited one leaves it as
    /// on_packet_sent set it; `app_idle` and `app_data` change nothing (a send
    /// call that finds nothing is Done before any update).  Checked against
    /// quiche 0.30.0's own connection, which logs the flag (`cf_app_limited`,
    /// docs/connection-mode.md).
    Conn,
    /// As quiche's unit tests (TestSender): only mod.rs:201.
    Cc,
    /// The trace's flag of the last sent packet (an idealised connection).
    Trace,
}
/// The sent-packet map's hasher.  The map is keyed by packet number and never iterated
/// (only insert, get, remove), so its order is no part of what the adapter does: a
/// multiplicative hash of the number instead of std's SipHash with a per-map random seed,
/// which cost a tenth of a fuzz execution and made the instrumented hash table probe
/// differently on every run (AFL++ saw those edges as unstable; docs/fuzzing.md).
#[derive(Default)]
struct PnHasher(u64);

impl std::hash::Hasher for PnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type PnMap<V> = HashMap<u64, V, BuildHasherDefault<PnHasher>>;


struct Ctl {
    base: Instant,
    reno: bool,
    app_limited: AppLimited,
    /// Between the trace's `app_idle` and the next `app_data`: the application
    /// has nothing to send, so every packet sent then (a retransmission, a
    /// probe) ends a send loop that finds nothing more (trace-format.md).
    app_idle: bool,
    cc: q::Cc,
    rtt: q::Rtt,
    /// Packets quiche still tracks as sent and neither acked nor lost.
    sent: PnMap<q::SentPacket>,
    /// RecoveryEpoch.largest_acked_packet.
    largest_acked: Option<u64>,
    /// What RecoveryEpoch.sent_packets still holds, in packet-number order.
    held: VecDeque<(u64, Held)>,
    last_error: CString,
}

/// A packet as RecoveryEpoch.sent_packets holds it.  quiche treats an ACK of a packet
/// it declared lost as spurious, and rolls the window back, only while that packet is
/// still in sent_packets (recovery.rs:173-182 in 0.30.0, 168-177 in 0.26.0);
/// drain_acked_and_lost_packets (recovery.rs:305-327; 0.26.0 :300-322) drops the
/// leading acked packets and the leading packets lost more than one smoothed RTT ago.
/// The harness reports every ACK of a lost packet as spurious, so the adapter keeps
/// this much of the deque to call rollback only where quiche would.
#[derive(Clone, Copy)]
enum Held {
    Outstanding,
    Acked,
    Lost(Instant),
}

const OPTIONS: &str = "cc=cubic|reno, idle_fix=on|off, hystart=on|off, \
                       app_limited=conn|cc|trace";

// Peer's max_ack_delay transport parameter default (transport_params.rs:211);
// the connection hands the peer's value to recovery on handshake (lib.rs:8041-8047):
// here the trace header's, ccd_config.max_ack_delay_us (ABI 4).
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);
// Config defaults (lib.rs: DEFAULT_INITIAL_RTT, ..._CONGESTION_WINDOW_PACKETS).
const DEFAULT_INITIAL_RTT: Duration = Duration::from_millis(333);
const INITIAL_CWND_PACKETS: usize = 10;

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
    PANIC_MSG
        .with(|m| m.borrow_mut().take())
        .unwrap_or_else(|| "panic".into())
}

fn parse_options(s: &str) -> Result<(q::Settings, AppLimited), String> {
    let mut st = q::Settings {
        reno: false,
        hystart: true,                // Config default: hystart on
        idle_fix: q::HAS_IDLE_FIX,    // Config default: fix on where it exists
        max_datagram_size: 0,
        initial_rtt: DEFAULT_INITIAL_RTT,
        max_ack_delay: MAX_ACK_DELAY,
        initial_congestion_window_packets: INITIAL_CWND_PACKETS,
    };
    let mut al = AppLimited::Conn;
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or(format!("option {item:?} is not key=value; accepted: {OPTIONS}"))?;
        let bad = || format!("option {k}: unknown value {v:?}; accepted: {OPTIONS}");
        let onoff = |v: &str| match v {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(bad()),
        };
        match k.trim() {
            "cc" => {
                st.reno = match v {
                    "cubic" => false,
                    "reno" => true,
                    _ => return Err(bad()),
                }
            },
            "hystart" => st.hystart = onoff(v)?,
            "idle_fix" => {
                st.idle_fix = onoff(v)?;
                // 0.26 always behaves as idle_fix=off, so "off" is a no-op.
                if st.idle_fix && !q::HAS_IDLE_FIX {
                    return Err(format!(
                        "option idle_fix=on: quiche {} has no \
                         RecoveryConfig.enable_cubic_idle_restart_fix (added in \
                         0.28.0); it always behaves as idle_fix=off",
                        q::VERSION
                    ));
                }
            },
            "app_limited" => {
                al = match v {
                    "conn" => AppLimited::Conn,
                    "cc" => AppLimited::Cc,
                    "trace" => AppLimited::Trace,
                    _ => return Err(bad()),
                }
            },
            _ => return Err(format!("unknown option {k:?}; accepted: {OPTIONS}")),
        }
    }
    Ok((st, al))
}

fn slice<'a>(p: *const CcdPacket, n: u32) -> &'a [CcdPacket] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: the harness passes n valid packets (ccdiff_adapter.h).
        unsafe { std::slice::from_raw_parts(p, n as usize) }
    }
}

impl Ctl {
    fn at(&self, us: i64) -> Result<Instant, String> {
        u64::try_from(us)
            .map(|us| self.base + Duration::from_micros(us))
            .map_err(|_| format!("negative time {us} us"))
    }

    fn us(&self, t: Option<Instant>) -> i64 {
        match t {
            None => CCD_NO_TIME,
            Some(t) => match t.checked_duration_since(self.base) {
                Some(d) => d.as_micros() as i64,
                None => -((self.base - t).as_micros() as i64),
            },
        }
    }

    fn step(&mut self, ev: &CcdEvent, out: &mut CcdSnapshot) -> Result<(), String> {
        let now = self.at(ev.now_us)?;
        let pkts = slice(ev.packets, ev.n_packets);
        let bif = ev.bytes_in_flight as usize;
        let bytes: usize = pkts.iter().map(|p| p.bytes as usize).sum();
        let bif_after = match ev.kind {
            CCD_SENT => self.on_sent(ev, pkts, now)?,
            CCD_LOST => self.on_lost(bif, pkts, bytes, now)?,
            CCD_ACKED => self.on_acked(ev, pkts, bytes, now)?,
            // LegacyRecovery never declares persistent congestion: nothing in
            // recovery/congestion/ collapses the window (RFC 9002 7.6.2).
            CCD_PERSISTENT_CONGESTION => bif,
            CCD_APP_IDLE => self.on_app_idle(bif),
            // An application write (stream_send) reaches recovery only through
            // the next send() (lib.rs:4138 delivery_rate_check_if_app_limited).
            CCD_APP_DATA => {
                self.app_idle = false;
                bif
            },
            k => return Err(format!("unknown event kind {k}")),
        };
        self.snapshot(now, bif_after as u64, out);
        Ok(())
    }

    // LegacyRecovery::on_packet_sent (recovery.rs:618-647).
    fn on_sent(&mut self, ev: &CcdEvent, pkts: &[CcdPacket], now: Instant) -> Result<usize, String> {
        let [p] = pkts else {
            return Err(format!("CCD_SENT carries {} packets, expected 1", pkts.len()));
        };
        // lib.rs:5515: the delivery-rate sampler is told before the send.
        if p.app_limited != 0 {
            self.cc.delivery_rate_update_app_limited(true);
        }
        // bytes_in_flight before this packet (recovery.rs:636-647); bytes_lost
        // is LegacyRecovery.bytes_lost, which it never increments (:641).
        let rec = self.cc.on_packet_sent(
            ev.bytes_in_flight as usize, p.pn, p.bytes as usize, now, 0);
        match self.app_limited {
            AppLimited::Conn if p.app_limited == 0 && !self.app_idle => self.cc.update_app_limited(false),
            AppLimited::Conn | AppLimited::Cc => {},
            AppLimited::Trace => self.cc.update_app_limited(p.app_limited != 0),
        }
        self.sent.insert(p.pn, rec);
        self.held.push_back((p.pn, Held::Outstanding)); // recovery.rs:662 push_back
        Ok(ev.bytes_in_flight as usize + p.bytes as usize)
    }

    // A send() that found no application data (ABI 3 CCD_APP_IDLE): write_pkt_type
    // returns Done (lib.rs:8325) before send_single touches the flag, so only the
    // adapter's own note changes; with `app_limited=trace` the flag is cleared, as
    // that idealised model always did.
    fn on_app_idle(&mut self, bif: usize) -> usize {
        self.app_idle = true;
        if self.app_limited == AppLimited::Trace {
            self.cc.update_app_limited(false);
        }
        bif
    }

    // LegacyRecovery::detect_lost_packets (recovery.rs:531-569); the harness
    // delivers it before the CCD_ACKED of the ACK that revealed the loss, as
    // on_ack_received does (:731, before on_packets_acked at :736).
    fn on_lost(&mut self, bif: usize, pkts: &[CcdPacket], lost_bytes: usize, now: Instant) -> Result<usize, String> {
        let Some(last) = pkts.last() else { return Ok(bif) };
        // largest_lost_pkt is the last lost packet in pn order (:271).
        let largest = self.sent.remove(&last.pn)
            .ok_or_else(|| format!("lost packet {} was never sent or is already gone", last.pn))?;
        // :546: checkpoint only when the packet was sent outside recovery.
        if !self.cc.in_congestion_recovery(largest.time_sent()) {
            self.cc.checkpoint();
        }
        // :550: bytes_in_flight still includes the lost bytes.
        self.cc.congestion_event(bif, lost_bytes, &largest, now);
        for p in pkts {
            self.sent.remove(&p.pn);
            self.mark(p.pn, Held::Lost(now)); // :256 time_lost = now
        }
        self.drain(now); // :565-566
        self.cc.add_lost_count(pkts.len()); // :568
        Ok(bif.saturating_sub(lost_bytes))
    }

    // LegacyRecovery::on_ack_received (recovery.rs:672-750).
    fn on_acked(&mut self, ev: &CcdEvent, pkts: &[CcdPacket], acked_bytes: usize, now: Instant) -> Result<usize, String> {
        let bif = ev.bytes_in_flight as usize;
        // :683 detect_and_remove_acked_packets: an ACK of a packet quiche
        // still holds as lost is spurious (:173-182); the newly acked are
        // marked; then the deque is drained with the RTT before this ACK (:212).
        let mut spurious_in_flight = false;
        for p in slice(ev.spurious, ev.n_spurious) {
            if matches!(self.mark(p.pn, Held::Acked), Some(Held::Lost(_))) {
                spurious_in_flight = true; // every traced packet is in flight
            }
        }
        for p in pkts {
            self.mark(p.pn, Held::Acked);
        }
        self.drain(now);
        // :699-701: an ACK of a packet declared lost undoes the last
        // reduction, before anything else in this ACK.  Known gap: if this
        // same ACK also revealed new losses, quiche rolls back *before* that
        // congestion event (:734), but ccdiff delivered its CCD_LOST first.
        if spurious_in_flight {
            self.cc.rollback();
        }
        // :703: nothing newly acked, nothing more to do.
        let Some(largest) = pkts.last() else { return Ok(bif) };
        let mut recs = Vec::with_capacity(pkts.len());
        for p in pkts {
            recs.push(self.sent.remove(&p.pn)
                .ok_or_else(|| format!("acked packet {} was never sent or is already gone", p.pn))?);
        }
        // :709-722: RTT sample when the largest newly acked packet is the
        // largest acked so far (every traced packet is ack-eliciting);
        // handshake_status.completed is true in steady state.
        let largest_acked = self.largest_acked.map_or(largest.pn, |l| l.max(largest.pn));
        self.largest_acked = Some(largest_acked);
        if largest.pn == largest_acked {
            let sent_at = recs.last().map_or(now, |r| r.time_sent());
            let ack_delay = Duration::from_micros(ev.ack_delay_us.max(0) as u64);
            self.rtt.update_rtt(now.saturating_duration_since(sent_at), ack_delay, now, true);
        }
        // ECN-CE (flag CCD_FLAG_ECN_CE) is ignored: quiche sends no ECT
        // (lib.rs:4589) and never reads the ACK's ECN counts.
        // :736: bytes_in_flight before the acked bytes are removed (:743).
        let refs: Vec<&q::SentPacket> = recs.iter().collect();
        self.cc.on_packets_acked(bif, &refs, &self.rtt, now);
        // :734 detect_lost_packets (its drain, :566) and :749-750 drain again,
        // both with the updated RTT.
        self.drain(now);
        Ok(bif.saturating_sub(acked_bytes))
    }

    /// Sets a held packet's state; returns what it was (None: quiche no longer holds it).
    fn mark(&mut self, pn: u64, to: Held) -> Option<Held> {
        let i = self.held.binary_search_by_key(&pn, |&(n, _)| n).ok()?;
        Some(std::mem::replace(&mut self.held[i].1, to))
    }

    /// drain_acked_and_lost_packets(now - rtt_stats.rtt()) (recovery.rs:305-327):
    /// from the front, drop acked packets and packets lost at or before the threshold;
    /// stop at the first outstanding or recently lost one.
    fn drain(&mut self, now: Instant) {
        let thresh = now.checked_sub(self.rtt.smoothed_rtt());
        while let Some(&(_, h)) = self.held.front() {
            match h {
                Held::Outstanding => break,
                Held::Lost(t) if thresh.is_none_or(|th| t > th) => break,
                Held::Acked | Held::Lost(_) => {
                    self.held.pop_front();
                },
            }
        }
    }

    fn snapshot(&self, now: Instant, bif: u64, out: &mut CcdSnapshot) {
        let cc = &self.cc;
        let ssthresh = cc.ssthresh();
        // The phase is the branch quiche's growth code takes (cubic.rs:255,
        // reno.rs on_packet_acked): slow start, including HyStart++'s CSS,
        // while cwnd < ssthresh; otherwise congestion avoidance.  Not
        // state_str (reno.rs:146-148): it says "conservative_slow_start"
        // whenever in_css(), and in_css() stays true after CSS ends
        // (hystart.rs:170-183 returns true, cubic.rs:271-274 sets ssthresh =
        // cwnd, css_start_time is kept), while quiche already grows that
        // window in congestion avoidance with the CSS start as its epoch
        // (cubic.rs:276-281).  Recovery = a packet sent now counts as in
        // recovery (Congestion::in_congestion_recovery, mod.rs:169).
        out.phase = if cc.congestion_window() < ssthresh {
            CCD_PHASE_SLOW_START
        } else if cc.in_congestion_recovery(now) {
            CCD_PHASE_RECOVERY
        } else {
            CCD_PHASE_CONGESTION_AVOIDANCE
        };
        out.cwnd = cc.congestion_window() as u64;
        out.ssthresh = if ssthresh == usize::MAX { CCD_NONE } else { ssthresh as u64 };
        // The adapter drives Congestion, not LegacyRecovery, so this is the
        // harness's count (event value + this event's change).
        out.bytes_in_flight = bif;
        out.reserved = 0;
        let recovery = cc.congestion_recovery_start_time();
        out.recovery_start_us = self.us(recovery);
        if self.reno {
            out.epoch_start_us = CCD_NO_TIME;
            out.w_max_bytes = f64::NAN;
            out.k_us = f64::NAN;
        } else {
            // CUBIC has no epoch field: t = now - congestion_recovery_start_time
            // (cubic.rs:292-309), or - css_start_time while HyStart++ is in CSS
            // (cubic.rs:280-281).  So the epoch is the recovery-start field.
            let epoch = if cc.hystart_in_css() { cc.hystart_css_start_time() } else { recovery };
            out.epoch_start_us = self.us(epoch);
            out.w_max_bytes = cc.cubic_w_max(); // bytes; 0.0 until first set
            out.k_us = cc.cubic_k() * 1e6;      // quiche keeps K in seconds
        }
    }
}

fn write_err(err: *mut c_char, len: usize, msg: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller provides err_len writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

#[no_mangle]
pub extern "C" fn ccd_abi_version() -> u32 {
    CCD_ABI_VERSION
}

#[no_mangle]
pub extern "C" fn ccd_describe() -> *const c_char {
    static DESC: OnceLock<CString> = OnceLock::new();
    DESC.get_or_init(|| {
        let idle = if q::HAS_IDLE_FIX { "" } else { " (this version: off only)" };
        CString::new(format!(
            "quiche {} cubic; options: cc=cubic|reno, idle_fix=on|off{idle}, \
             hystart=on|off, app_limited=conn|cc|trace; {}",
            q::VERSION,
            build_checks()
        ))
        .unwrap()
    })
    .as_ptr()
}

/// What this build keeps armed (Cargo.toml [profile.release]), so tests can see that
/// every build, the plain one and the fuzzers' sancov one, kept it.
fn build_checks() -> String {
    let on = |armed: bool| if armed { "on" } else { "off" };
    // overflow-checks has no stable cfg: probe it (the hook records the panic, never prints).
    install_panic_hook();
    let overflow = catch_unwind(|| std::hint::black_box(u32::MAX) + std::hint::black_box(1)).is_err();
    let _ = panic_message();
    format!("debug-assertions {}, overflow-checks {}", on(cfg!(debug_assertions)), on(overflow))
}

fn open(cfg: *const CcdConfig) -> Result<Box<Ctl>, String> {
    // SAFETY: the harness passes a valid config (or NULL, rejected here).
    let cfg = unsafe { cfg.as_ref() }.ok_or("config is NULL")?;
    let opts = if cfg.options.is_null() {
        ""
    } else {
        unsafe { CStr::from_ptr(cfg.options) }.to_str().map_err(|_| "options are not UTF-8")?
    };
    let (mut st, app_limited) = parse_options(opts)?;
    if cfg.max_datagram_size == 0 {
        return Err("max_datagram_size is 0".into());
    }
    st.max_datagram_size = cfg.max_datagram_size as usize;
    if cfg.initial_rtt_us > 0 {
        st.initial_rtt = Duration::from_micros(cfg.initial_rtt_us as u64);
    }
    st.max_ack_delay = Duration::from_micros(cfg.max_ack_delay_us as u64);
    if cfg.clock_base_us <= 0 || cfg.clock_base_us > CCD_MAX_CLOCK_BASE_US {
        return Err(format!("clock_base_us {} is not in 1..{CCD_MAX_CLOCK_BASE_US}", cfg.clock_base_us));
    }
    Ok(Box::new(Ctl {
        base: Instant::now() + Duration::from_micros(cfg.clock_base_us as u64),
        reno: st.reno,
        app_limited,
        app_idle: false,
        cc: q::Cc::new(&st),
        rtt: q::Rtt::new(st.initial_rtt, st.max_ack_delay),
        sent: PnMap::with_capacity_and_hasher(32, Default::default()),
        largest_acked: None,
        held: VecDeque::new(),
        last_error: CString::default(),
    }))
}

#[no_mangle]
pub extern "C" fn ccd_open(cfg: *const CcdConfig, err: *mut c_char, err_len: usize) -> *mut c_void {
    install_panic_hook();
    let r = catch_unwind(|| open(cfg)).unwrap_or_else(|_| Err(panic_message()));
    match r {
        Ok(ctl) => Box::into_raw(ctl) as *mut c_void,
        Err(e) => {
            write_err(err, err_len, &e);
            std::ptr::null_mut()
        },
    }
}

#[no_mangle]
pub extern "C" fn ccd_step(ctl: *mut c_void, ev: *const CcdEvent, out: *mut CcdSnapshot) -> i32 {
    // SAFETY: ctl comes from ccd_open; ev/out are valid per the header.
    let Some(ctl) = (unsafe { (ctl as *mut Ctl).as_mut() }) else { return -1 };
    let (Some(ev), Some(out)) = (unsafe { ev.as_ref() }, unsafe { out.as_mut() }) else {
        ctl.last_error = c"event or snapshot pointer is NULL".into();
        return -1;
    };
    let r = catch_unwind(AssertUnwindSafe(|| ctl.step(ev, out)))
        .unwrap_or_else(|_| Err(format!("quiche panicked: {}", panic_message())));
    match r {
        Ok(()) => 0,
        Err(e) => {
            ctl.last_error = CString::new(e.replace('\0', " ")).unwrap_or_default();
            -1
        },
    }
}

#[no_mangle]
pub extern "C" fn ccd_last_error(ctl: *mut c_void) -> *const c_char {
    match unsafe { (ctl as *const Ctl).as_ref() } {
        Some(ctl) => ctl.last_error.as_ptr(),
        None => c"no controller".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn ccd_close(ctl: *mut c_void) {
    if !ctl.is_null() {
        let _ = catch_unwind(|| drop(unsafe { Box::from_raw(ctl as *mut Ctl) }));
    }
}
