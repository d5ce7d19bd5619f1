//! ccdiff adapter for quinn's congestion controllers: `quinn_proto::congestion::Cubic`
//! and `NewReno`, driven through the public `congestion::Controller` trait in the
//! order quinn's `Connection` calls it.  "mod.rs:N" is
//! quinn-proto-0.11.19/src/connection/mod.rs, "paths.rs:N" src/connection/paths.rs,
//! "cubic.rs:N" / "new_reno.rs:N" src/congestion/, "congestion.rs:N" src/congestion.rs.
//!
//! Per ACK frame, `Connection::on_ack_received` (mod.rs:1465-1575) does, in order:
//!   1. largest_acked / largest_acked_packet_sent (mod.rs:1476-1488);
//!   2. for every newly acked packet, ascending: MTU discovery (mod.rs:1517-1522,
//!      on_mtu_update when a probe is acked: never here, the trace's datagram size
//!      is fixed), then `on_packet_acked` -> `Controller::on_ack(now, time_sent,
//!      size, self.app_limited, &self.path.rtt)` (mod.rs:1527, 1613-1625);
//!   3. `Controller::on_end_acks(now, in_flight.bytes, app_limited,
//!      largest_acked_packet)` (mod.rs:1531-1536);
//!   4. the RTT sample, AFTER the controller saw the ACK (mod.rs:1538-1552): on_ack
//!      reads the estimate from before this ACK;
//!   5. loss detection, `detect_lost_packets(now, space, due_to_ack = true)`
//!      (mod.rs:1556) -> one `on_congestion_event(now, largest_lost_sent,
//!      in_persistent_congestion, lost_bytes)` per batch (mod.rs:1803-1812);
//!   6. ECN: a CE increase on an ACK with a new largest ->
//!      `on_congestion_event(now, largest_acked_packet_sent, false, 0)`
//!      (mod.rs:1563-1576, 1585-1607).
//! ccdiff delivers CCD_LOST (and CCD_PERSISTENT_CONGESTION) before the CCD_ACKED of
//! the ACK that revealed them, so a loss is held back ("pending") and applied in
//! step 5 of the CCD_ACKED at the same time after which quinn's own detection rule
//! (packet or time threshold, mod.rs:1724-1725) finds it: with one ACK frame that is
//! it; with two frames at one instant (a split ACK) usually the second, which carries
//! the largest acknowledged (`loss_applied_with_ack` in stack.toml).  The CCD_LOST snapshot itself is computed on a clone as the loss
//! timer would leave it (`on_loss_detection_timeout` -> `detect_lost_packets(..,
//! due_to_ack = false)`, mod.rs:1655-1660); if anything but an ACK at the same time
//! follows, the pending loss is committed through that timer path, where quinn never
//! declares persistent congestion (the check needs due_to_ack, mod.rs:1733).
//!
//! Sends: `poll_transmit` calls `Controller::on_sent(now, datagram bytes, last pn)`
//! after each datagram (mod.rs:935-937; a no-op for Cubic and NewReno, which keep
//! the trait's default, congestion.rs:20), and ends every call with
//! `self.app_limited = buf.is_empty() && !congestion_blocked` (mod.rs:947).  An
//! application drives poll_transmit until it returns None, so between bursts the
//! flag says how the last call ended: nothing to send with room in the window
//! (true) or blocked by the window / pacing (false, mod.rs:616-639).  The adapter
//! keeps that flag: after a CCD_SENT it is the packet's app-limited flag (the burst
//! ran out of data before the window filled), CCD_APP_IDLE sets it (a poll that
//! found no data, mod.rs:947), CCD_APP_DATA clears it (the write wakes the
//! connection, whose next poll_transmit sends or is blocked: false either way).
//! quinn has no other idle handling: no restart, no epoch shift; Cubic and NewReno
//! only skip growth while app_limited (cubic.rs:102-109, new_reno.rs:52-54).
//!
//! RTT: `on_ack` takes quinn's own `RttEstimator` (paths.rs:291-355).  Its
//! constructor and update are pub(crate), so the build adds a forwarding facade
//! (`ccdiff_new`, `ccdiff_update`: ../patches/apply.py).  The adapter runs quinn's
//! estimator on the trace's ACKs exactly as mod.rs:1538-1548 does (sample = now -
//! send time of the frame's largest when it is a new largest; ack_delay as the
//! peer reports it, capped at the peer's max_ack_delay, ccd_config.max_ack_delay_us
//! (mod.rs:1542-1545; ccdiff traces carry microseconds, so no ack_delay_exponent).
//!
//! Snapshot: `window()` (public), ssthresh from `metrics()` (public, cubic.rs:226-232,
//! new_reno.rs:115-121).  recovery_start_time, W_max and K are private fields; they
//! are read through read-only accessors the build appends (`ccdiff_state`,
//! `ccdiff_recovery_start_time`: ../patches/apply.py), which return the values the
//! controllers' derived `Debug` prints (cubic.rs:20, 60; new_reno.rs:9).  The adapter
//! parsed that Debug output until the fuzz harnesses showed it cost most of an
//! execution (docs/fuzzing.md); the snapshots are the same.  Never recomputed.
//! Cubic's epoch is its recovery_start_time: t = now - recovery_start_time
//! (cubic.rs:118-131).
//!
//! Virtual time: trace time t is `base + Duration::from_micros(t)`, with `base` the
//! `Instant` at `ccd_open` plus the harness's `clock_base_us`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Once, OnceLock};
use std::time::{Duration, Instant};

use quinn_proto::congestion::{Controller, Cubic, CubicConfig, NewReno, NewRenoConfig};
use quinn_proto::RttEstimator;

const CCD_ABI_VERSION: u32 = 4;
const CCD_MAX_CLOCK_BASE_US: i64 = 315_360_000_000_000;
const CCD_NONE: u64 = u64::MAX;
const CCD_NO_TIME: i64 = i64::MIN;

const CCD_SENT: u32 = 1;
const CCD_ACKED: u32 = 2;
const CCD_LOST: u32 = 3;
const CCD_PERSISTENT_CONGESTION: u32 = 4;
const CCD_APP_IDLE: u32 = 5;
const CCD_APP_DATA: u32 = 6;
const CCD_FLAG_ECN_CE: u32 = 1 << 1;

const CCD_PHASE_SLOW_START: u32 = 1;
const CCD_PHASE_CONGESTION_AVOIDANCE: u32 = 2;
const CCD_PHASE_RECOVERY: u32 = 3;

const VERSION: &str = "0.11.19";
const OPTIONS: &str = "cc=cubic|reno, mtu=initial|discovered";
// TransportConfig's default initial_mtu (INITIAL_MTU, config/transport.rs:385).
const INITIAL_MTU: u16 = 1200;

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
    PANIC_MSG.with(|m| m.borrow_mut().take()).unwrap_or_else(|| "panic".into())
}

/// The two controllers, concrete (so Clone and Debug are available), called only
/// through `Controller` trait methods.
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
    /// recovery_start_time, and Cubic's (W_max, K): private fields, read through the
    /// build's read-only facade (patches/apply.py); the values their derived Debug prints.
    fn private_state(&self) -> (Option<Instant>, Option<(f64, f64)>) {
        match self {
            Cc::Cubic(c) => {
                let (recovery, w_max, k) = c.ccdiff_state();
                (recovery, Some((w_max, k)))
            },
            Cc::Reno(c) => (Some(c.ccdiff_recovery_start_time()), None),
        }
    }
}

struct Sent {
    time: Instant,
    bytes: u64,
}

/// Losses held back until the ACK at the same time (see top).
#[derive(Default)]
struct Pending {
    now_us: i64,
    /// Packets of this detection batch, ascending.
    pns: Vec<u64>,
    bytes: u64,
    /// Their send times, in the same order.
    sent: Vec<Instant>,
    /// Sent time of the largest lost packet (mod.rs:1768).
    largest_sent: Option<Instant>,
    persistent: bool,
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
    /// Debug of `base`'s (tv_sec, tv_nsec), to read Instants back from Debug.
    base_parts: Option<(i128, i128)>,
    reno: bool,
    cc: Cc,
    rtt: RttEstimator,
    /// quinn's Connection.app_limited (mod.rs:235, 947).
    app_limited: bool,
    sent: PnMap<Sent>,
    /// PacketSpace.largest_acked_packet / largest_acked_packet_sent (mod.rs:1476-1488).
    largest_acked: Option<u64>,
    largest_acked_sent: Option<Instant>,
    /// ack_frequency.peer_max_ack_delay (mod.rs:1543): the trace header's.
    peer_max_ack_delay: Duration,
    pending: Option<Pending>,
    last_us: i64,
    last_error: CString,
}

fn slice<'a>(p: *const CcdPacket, n: u32) -> &'a [CcdPacket] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: the harness passes n valid packets (ccdiff_adapter.h).
        unsafe { std::slice::from_raw_parts(p, n as usize) }
    }
}

/// `Instant { tv_sec: S, tv_nsec: N }` (std's Debug of a unix Instant) -> (S, N).
fn instant_parts(text: &str) -> Option<(i128, i128)> {
    let sec = text.split("tv_sec: ").nth(1)?;
    let sec: i128 = sec.split(|c: char| !c.is_ascii_digit() && c != '-').next()?.parse().ok()?;
    let nsec = text.split("tv_nsec: ").nth(1)?;
    let nsec: i128 = nsec.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    Some((sec, nsec))
}

impl Ctl {
    fn at(&self, us: i64) -> Result<Instant, String> {
        u64::try_from(us)
            .map(|us| self.base + Duration::from_micros(us))
            .map_err(|_| format!("negative time {us} us"))
    }

    /// An Instant in trace microseconds: (t - base) in nanoseconds, floored to
    /// microseconds.  The same number the adapter read from the Instants' Debug
    /// ((tv_sec, tv_nsec) differences) before the facade; none when base's Debug could
    /// not be read, as then.
    fn instant_us(&self, t: Instant) -> Option<i64> {
        self.base_parts?;
        let ns = match t.checked_duration_since(self.base) {
            Some(d) => d.as_nanos() as i128,
            None => -((self.base - t).as_nanos() as i128),
        };
        Some((ns.div_euclid(1000)) as i64)
    }

    fn check(&self, ev: &CcdEvent) -> Result<(), String> {
        if ev.now_us < self.last_us {
            return Err(format!("time {} goes backwards (last {})", ev.now_us, self.last_us));
        }
        if ev.n_packets > 0 && ev.packets.is_null() {
            return Err("event without its packets".into());
        }
        if ev.n_spurious > 0 && ev.spurious.is_null() {
            return Err("event without its spurious packets".into());
        }
        Ok(())
    }

    fn step(&mut self, ev: &CcdEvent, out: &mut CcdSnapshot) -> Result<(), String> {
        self.check(ev)?;
        let now = self.at(ev.now_us)?;
        // A held-back loss that no ACK at the same time follows was the loss timer's
        // (mod.rs:1655-1660).  Only receive-path events share its instant; a send or an
        // application event comes from poll_transmit, after it.
        if let Some(p) = &self.pending {
            let same_burst = p.now_us == ev.now_us
                && matches!(ev.kind, CCD_ACKED | CCD_LOST | CCD_PERSISTENT_CONGESTION);
            // A lost after persistent congestion at the same time is a later loss
            // detection: the collapsed batch goes first (as ngtcp2's adapter does).
            let later_detection = ev.kind == CCD_LOST && p.persistent;
            if !same_burst || later_detection {
                let p = self.pending.take().unwrap();
                let at = self.at(p.now_us)?;
                Self::congestion_event(&mut self.cc, at, &p, p.persistent && later_detection);
            }
        }
        self.last_us = ev.now_us;
        let pkts = slice(ev.packets, ev.n_packets);
        let bif = ev.bytes_in_flight;
        let bytes: u64 = pkts.iter().map(|p| p.bytes as u64).sum();
        let bif_after = match ev.kind {
            CCD_SENT => self.on_sent(ev, pkts, now)?,
            CCD_LOST => self.on_lost(ev, pkts, bytes)?,
            CCD_PERSISTENT_CONGESTION => {
                match &mut self.pending {
                    Some(p) if p.now_us == ev.now_us => p.persistent = true,
                    _ => return Err("persistent_congestion must follow lost at the same time".into()),
                }
                bif
            },
            CCD_ACKED => self.on_acked(ev, pkts, bytes, now)?,
            CCD_APP_IDLE => {
                // A poll_transmit with no data and room in the window (mod.rs:947).
                self.app_limited = true;
                bif
            },
            CCD_APP_DATA => {
                // The write wakes the connection; its poll_transmit sends (a CCD_SENT
                // follows) or is congestion-/pacing-blocked: false either way (mod.rs:947).
                self.app_limited = false;
                bif
            },
            k => return Err(format!("unknown event kind {k}")),
        };
        match &self.pending {
            Some(p) => {
                // What the loss timer would leave (provisional); the ACK redoes it in order.
                let mut scratch = self.cc.clone();
                let p_now = self.at(p.now_us)?;
                Self::congestion_event(&mut scratch, p_now, p, p.persistent);
                self.snapshot(&scratch, now, bif_after, out);
            },
            None => self.snapshot(&self.cc, now, bif_after, out),
        }
        Ok(())
    }

    // poll_transmit, one datagram: builder.finish_and_track, then on_sent (mod.rs:933-937),
    // then the loop's end (mod.rs:947).
    fn on_sent(&mut self, ev: &CcdEvent, pkts: &[CcdPacket], now: Instant) -> Result<u64, String> {
        let [p] = pkts else {
            return Err(format!("CCD_SENT carries {} packets, expected 1", pkts.len()));
        };
        if self.sent.contains_key(&p.pn) {
            return Err(format!("packet {} sent twice", p.pn));
        }
        self.sent.insert(p.pn, Sent { time: now, bytes: p.bytes as u64 });
        self.cc.c().on_sent(now, p.bytes as u64, p.pn);
        self.app_limited = p.app_limited != 0;
        Ok(ev.bytes_in_flight + p.bytes as u64)
    }

    // detect_lost_packets' batch (mod.rs:1692-1816), held back (see top).
    fn on_lost(&mut self, ev: &CcdEvent, pkts: &[CcdPacket], bytes: u64) -> Result<u64, String> {
        let p = self.pending.get_or_insert_with(|| Pending { now_us: ev.now_us, ..Default::default() });
        for pk in pkts {
            let s = self.sent.remove(&pk.pn)
                .ok_or_else(|| format!("lost packet {} was never sent or is already gone", pk.pn))?;
            // lost_packets is in packet-number order; the batch's largest decides `sent`
            // (mod.rs:1766-1768).
            if p.pns.last().is_none_or(|&l| pk.pn > l) {
                p.largest_sent = Some(s.time);
            }
            p.pns.push(pk.pn);
            p.sent.push(s.time);
            p.bytes += s.bytes;
        }
        Ok(ev.bytes_in_flight.saturating_sub(bytes))
    }

    /// detect_lost_packets' rule (mod.rs:1698-1725): a packet below the largest acknowledged
    /// is lost when the largest acknowledged is kPacketThreshold (TransportConfig
    /// packet_threshold, default 3) above it, or when it was sent at least
    /// max(time_threshold (9/8) x conservative RTT, 1 ms) ago.
    fn quinn_detects(&self, p: &Pending, now: Instant) -> bool {
        let Some(largest) = self.largest_acked else { return false };
        let loss_delay = self.rtt.conservative().mul_f32(9.0 / 8.0).max(Duration::from_millis(1));
        p.pns.iter().zip(&p.sent).any(|(&pn, &sent)| {
            pn < largest
                && (now.saturating_duration_since(sent) >= loss_delay || largest >= pn + 3)
        })
    }

    /// OnPacketsLost's controller call (mod.rs:1803-1812): one congestion event for the
    /// batch, at the send time of its largest packet.
    fn congestion_event(cc: &mut Cc, now: Instant, p: &Pending, persistent: bool) {
        if let Some(sent) = p.largest_sent {
            cc.c().on_congestion_event(now, sent, persistent, p.bytes);
        }
    }

    // Connection::on_ack_received (mod.rs:1465-1575).
    fn on_acked(&mut self, ev: &CcdEvent, pkts: &[CcdPacket], acked_bytes: u64, now: Instant) -> Result<u64, String> {
        let spurious = slice(ev.spurious, ev.n_spurious);
        // The frame's largest: the largest newly acked or re-acked packet.
        let frame_largest = pkts.iter().chain(spurious).map(|p| p.pn).max();
        // mod.rs:1476-1488: a new largest updates largest_acked_packet, and its send
        // time when quinn still tracks the packet (a packet declared lost is gone
        // from sent_packets, mod.rs:1777, so the old send time stays).
        let mut new_largest = false;
        if let Some(l) = frame_largest {
            if self.largest_acked.is_none_or(|pn| l > pn) {
                self.largest_acked = Some(l);
                if let Some(s) = self.sent.get(&l) {
                    self.largest_acked_sent = Some(s.time);
                }
                new_largest = true;
            }
        }
        // Packets acknowledged after being declared lost are not in sent_packets:
        // quinn does nothing for them (mod.rs:1491-1497), and has no undo.
        // mod.rs:1499-1501: nothing newly acked, nothing more: no loss detection, no ECN
        // (the pending loss is then committed by a later frame or event).
        if pkts.is_empty() {
            return Ok(ev.bytes_in_flight);
        }
        let pending_bytes = self.pending.as_ref().map_or(0, |p| p.bytes);
        let mut in_flight = ev.bytes_in_flight + pending_bytes;
        {
            // mod.rs:1503-1529: per packet, ascending pn: on_ack with the estimator as it
            // is before this ACK's sample, and the connection's app_limited.
            for p in pkts {
                let s = self.sent.remove(&p.pn)
                    .ok_or_else(|| format!("acked packet {} was never sent or is already gone", p.pn))?;
                in_flight = in_flight.saturating_sub(s.bytes); // remove_in_flight, mod.rs:1614
                let rtt = self.rtt;
                self.cc.c().on_ack(now, s.time, s.bytes, self.app_limited, &rtt);
            }
            // mod.rs:1531-1536.
            let (al, largest) = (self.app_limited, self.largest_acked);
            self.cc.c().on_end_acks(now, in_flight, al, largest);
            // mod.rs:1538-1552: RTT sample after the controller saw the ACK (every traced
            // packet is ack-eliciting; Data space: the peer's ack delay counts).
            if new_largest {
                if let Some(sent) = self.largest_acked_sent {
                    let reported = Duration::from_micros(ev.ack_delay_us.max(0) as u64);
                    let ack_delay = reported.min(self.peer_max_ack_delay);
                    self.rtt.ccdiff_update(ack_delay, now.saturating_duration_since(sent));
                }
            }
        }
        // mod.rs:1556: loss detection after all of it.  The held-back batch is applied
        // in the ACK frame after which quinn's own rule finds it lost; two ACK frames at
        // one instant (a split ACK) are processed one after the other, and the loss the
        // trace wrote before them belongs to the frame that reveals it, usually the one
        // carrying the largest acknowledged.  Until then the batch stays pending (the
        // snapshot is provisional); if no frame at this instant reveals it, the next
        // event commits it through the timer path.
        let reveals = match &self.pending {
            Some(p) if p.now_us == ev.now_us => self.quinn_detects(p, now),
            _ => false,
        };
        if reveals {
            let p = self.pending.take().unwrap();
            Self::congestion_event(&mut self.cc, now, &p, p.persistent);
        }
        // mod.rs:1563-1576: an ECN-CE increase counts only on an ACK with a new largest.
        if ev.flags & CCD_FLAG_ECN_CE != 0 && new_largest {
            if let Some(sent) = self.largest_acked_sent {
                self.cc.c().on_congestion_event(now, sent, false, 0);
            }
        }
        Ok(ev.bytes_in_flight.saturating_sub(acked_bytes))
    }

    fn snapshot(&self, cc: &Cc, now: Instant, bif: u64, out: &mut CcdSnapshot) {
        let ctl = cc.r();
        let window = ctl.window();
        let ssthresh = ctl.metrics().ssthresh.unwrap_or(u64::MAX);
        let (recovery_start, cubic_state) = cc.private_state();
        let now_us = self.instant_us(now);
        let recovery = recovery_start.and_then(|t| self.instant_us(t));
        // Phase as quinn's own tests branch: slow start while window < ssthresh
        // (cubic.rs:111, new_reno.rs:56); recovery while a packet sent now would still
        // count as sent during it (`sent <= recovery_start_time`, cubic.rs:105,
        // new_reno.rs:52), i.e. only at the instant the period began.
        out.phase = if window < ssthresh {
            CCD_PHASE_SLOW_START
        } else if recovery.is_some() && now_us.is_some() && now_us <= recovery {
            CCD_PHASE_RECOVERY
        } else {
            CCD_PHASE_CONGESTION_AVOIDANCE
        };
        out.cwnd = window;
        out.ssthresh = if ssthresh == u64::MAX { CCD_NONE } else { ssthresh };
        // quinn's in-flight count lives in the Connection (PathData.in_flight), not the
        // controller: this is the harness's count (event value + change).
        out.bytes_in_flight = bif;
        out.reserved = 0;
        out.recovery_start_us = recovery.unwrap_or(CCD_NO_TIME);
        if self.reno {
            out.epoch_start_us = CCD_NO_TIME;
            out.w_max_bytes = f64::NAN;
            out.k_us = f64::NAN;
        } else {
            // Cubic: t = now - recovery_start_time (cubic.rs:118-131): the epoch.
            out.epoch_start_us = out.recovery_start_us;
            // cubic_state: State { k, w_max, cwnd_inc } (cubic.rs:20-28): W_max in bytes,
            // K in seconds (cubic.rs:36-40); 0.0 until first set.
            out.w_max_bytes = cubic_state.map_or(f64::NAN, |(w_max, _)| w_max);
            out.k_us = cubic_state.map_or(f64::NAN, |(_, k)| k * 1e6);
        }
    }
}

fn parse_options(s: &str) -> Result<(bool, bool), String> {
    let (mut reno, mut discovered) = (false, false);
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or(format!("option {item:?} is not key=value; accepted: {OPTIONS}"))?;
        let bad = || format!("option {k}: unknown value {v:?}; accepted: {OPTIONS}");
        match k.trim() {
            "cc" => {
                reno = match v {
                    "cubic" => false,
                    "reno" | "newreno" => true,
                    _ => return Err(bad()),
                }
            },
            "mtu" => {
                discovered = match v {
                    "initial" => false,
                    "discovered" => true,
                    _ => return Err(bad()),
                }
            },
            _ => return Err(format!("unknown option {k:?}; accepted: {OPTIONS}")),
        }
    }
    Ok((reno, discovered))
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
        CString::new(format!("quinn-proto {VERSION} cubic; options: {OPTIONS}; {}", build_checks()))
            .unwrap()
    })
    .as_ptr()
}

/// What this build keeps armed (Cargo.toml [profile.release]).
fn build_checks() -> String {
    let on = |armed: bool| if armed { "on" } else { "off" };
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
    let (reno, discovered) = parse_options(opts)?;
    let mds = u16::try_from(cfg.max_datagram_size)
        .ok()
        .filter(|&m| m >= INITIAL_MTU)
        .ok_or(format!("max_datagram_size {} is not in 1200..65535", cfg.max_datagram_size))?;
    if cfg.clock_base_us <= 0 || cfg.clock_base_us > CCD_MAX_CLOCK_BASE_US {
        return Err(format!("clock_base_us {} is not in 1..{CCD_MAX_CLOCK_BASE_US}", cfg.clock_base_us));
    }
    // TransportConfig::initial_rtt (default 333 ms, config/transport.rs:384); the path's
    // estimator starts from it (paths.rs:70).
    let initial_rtt = if cfg.initial_rtt_us > 0 {
        Duration::from_micros(cfg.initial_rtt_us as u64)
    } else {
        Duration::from_millis(333)
    };
    let base = Instant::now() + Duration::from_micros(cfg.clock_base_us as u64);
    // The connection builds the controller at path creation, trace time 0, with
    // get_initial_mtu() (paths.rs:66-69) and the factory's default config
    // (initial_window 12000 = 14720.clamp(2 * 1200, 10 * 1200), cubic.rs:263-269,
    // new_reno.rs:159-166: not scaled by the MTU).
    //
    // Created 1 us before trace time 0: Connection::new builds the path (and its
    // controller) before the first poll_transmit can send (a packet is never sent in
    // the instant of its connection's creation by quinn's own Endpoint driver, which
    // reads the clock again for every call).  It matters to NewReno only, whose
    // recovery_start_time starts at `now` (new_reno.rs:31) and treats every packet
    // sent at or before it as sent during recovery (new_reno.rs:52, 92): created at
    // trace time 0, the losses and ACKs of packets sent at t = 0 would be ignored,
    // and the verdict would change when a trace is shifted in time
    // (docs/metamorphic.md).  Cubic::new ignores `now` (cubic.rs:77).
    let created = base - Duration::from_micros(1);
    let build_mtu = if discovered { INITIAL_MTU } else { mds };
    let mut cc = if reno {
        Cc::Reno(NewReno::new(Arc::new(NewRenoConfig::default()), created, build_mtu))
    } else {
        Cc::Cubic(Cubic::new(Arc::new(CubicConfig::default()), created, build_mtu))
    };
    if discovered && mds != INITIAL_MTU {
        // MTU discovery's probe acknowledged (mod.rs:1517-1522).
        cc.c().on_mtu_update(mds);
    }
    let base_parts = instant_parts(&format!("{base:?}"));
    Ok(Box::new(Ctl {
        base,
        base_parts,
        reno,
        cc,
        rtt: RttEstimator::ccdiff_new(initial_rtt),
        app_limited: false,
        sent: PnMap::with_capacity_and_hasher(32, Default::default()),
        largest_acked: None,
        largest_acked_sent: None,
        peer_max_ack_delay: Duration::from_micros(cfg.max_ack_delay_us as u64),
        pending: None,
        last_us: 0,
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
        .unwrap_or_else(|_| Err(format!("quinn panicked: {}", panic_message())));
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
