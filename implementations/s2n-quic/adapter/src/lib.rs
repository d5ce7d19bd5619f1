//! ccdiff adapter for s2n-quic's CUBIC: `s2n_quic_core::recovery::CubicCongestionController`,
//! driven through the public `recovery::CongestionController` trait in the order
//! s2n-quic's recovery manager calls it.  "cubic.rs:N" is s2n-quic-core-0.91.0/src/
//! recovery/cubic.rs, "hss.rs:N" src/recovery/hybrid_slow_start.rs, "rtt.rs:N"
//! src/recovery/rtt_estimator.rs, "cc.rs:N" src/recovery/congestion_controller.rs;
//! "manager.rs:N" is s2n-quic-transport-0.91.0/src/recovery/manager.rs (a separate crate,
//! read, not linked), "application.rs:N" its src/space/application.rs, "path.rs:N" its
//! src/path/mod.rs.
//!
//! Per ACK frame, `Manager::process_acks` (manager.rs:420-486) does, in order:
//!   1. removes the newly acked packets from sent_packets (manager.rs:489-569; no
//!      controller call but MTU probing's on_mtu_update, never here: the trace's
//!      datagram size is fixed);
//!   2. largest_acked_packet = the frame's largest acknowledged unless it already holds
//!      a larger one (manager.rs:444-450: an equal one counts as new);
//!   3. if anything was newly acked, `update_congestion_control` (manager.rs:571-626):
//!      when the frame's largest is newly acked (and ack-eliciting: every traced packet
//!      is), the RTT sample `now - time_sent` goes to `RttEstimator::update_rtt`, then
//!      `on_rtt_update(time_sent, now, &rtt)`: HyStart's delay sample (cubic.rs:254-284);
//!   4. `process_new_acked_packets` (manager.rs:628-742): loss detection FIRST
//!      (manager.rs:644 -> detect_and_remove_lost_packets, 832-1061): `on_packet_lost`
//!      once per lost packet, each with the batch's persistent-congestion flag
//!      (manager.rs:962-1004); then ECN when the frame has a new largest
//!      (manager.rs:718-726 -> on_explicit_congestion, 766-779); then ONE `on_ack` for
//!      the frame: all newly acked bytes, the send time of the largest newly acked
//!      packet, `now` (manager.rs:728-741).
//! ccdiff delivers CCD_LOST (and CCD_PERSISTENT_CONGESTION) before the CCD_ACKED of the
//! ACK that revealed them; since s2n takes the RTT sample (and HyStart's) before it
//! detects losses, a loss is held back ("pending") and applied in step 4 of the
//! CCD_ACKED at the same time after which s2n's own rule (loss::detect, packet or time
//! threshold, manager.rs:858-946) finds it (`loss_applied_with_ack` in stack.toml).
//! The CCD_LOST snapshot is computed on a clone as the loss timer would leave it
//! (`on_timeout` -> detect_and_remove_lost_packets, manager.rs:157-181: same calls, no
//! RTT sample); if anything but an ACK at the same time follows, the pending loss is
//! committed through that timer path.  s2n computes persistent congestion in both
//! paths (manager.rs:843-849, 970-973).
//!
//! Sends: `ApplicationSpace::on_packet_sent` computes `app_limited =
//! !path.is_congestion_limited(bytes_sent) && !self.has_transmission_interest()`
//! (application.rs:279, 587-589; path.rs:600-609: cwnd - (bytes_in_flight + this
//! packet) < max_datagram_size) and the recovery manager calls `on_packet_sent(now,
//! bytes, Some(app_limited), &rtt)` (manager.rs:216-250).  The trace's packet flag is
//! "the application had nothing more to send" (no transmission interest); the adapter
//! combines it with s2n's congestion-limited test, evaluated before the controller adds
//! the packet, exactly as application.rs:587-589 does.  The controller then keeps
//! `under_utilized` from the last packet sent (cubic.rs:221-232) and on_ack skips growth
//! (and stamps app_limited_time, which later shifts the epoch: cubic.rs:61-77, 113-132,
//! 302-312) while it holds.  CCD_APP_IDLE / CCD_APP_DATA: s2n's controller has no hook;
//! the connection learns it only through the next packet's app_limited, so both return
//! the snapshot.
//!
//! RTT: s2n's own `RttEstimator` (public: rtt.rs:65, 251), with the peer's max_ack_delay
//! at its transport-parameter default (25 ms, s2n-quic-core transport/parameters/mod.rs:844),
//! as `on_max_ack_delay` sets it once the parameters arrive; handshake confirmed,
//! ApplicationData space (ack_delay clamped to max_ack_delay, rtt.rs:300-305).
//!
//! Snapshot: `congestion_window()` and `bytes_in_flight()` (public trait methods: the
//! controller keeps its own count).  The slow-start threshold (HybridSlowStart.threshold,
//! f32::MAX = none), the state (SlowStart / Recovery(start, _) /
//! CongestionAvoidance { start_time, .. }), W_max (packets) and K are private; they are
//! read through a read-only accessor the build appends (`ccdiff_state`,
//! ../patches/apply.py), as the numbers the controller's derived `Debug` (cubic.rs:44, 96,
//! 138, 703; hss.rs:14) spells, which the adapter parsed until the fuzz harnesses showed
//! that formatting the controller twice per step cost most of an execution
//! (docs/fuzzing.md): W_max is still its f32 Debug text read as an f64, K its Duration
//! Debug text scaled (`DebugRead`), so the snapshots are the same.  Never recomputed.
//! The epoch is the congestion-avoidance `start_time` (t = now - start_time, cubic.rs:109),
//! which the app-limited rule moves forward.  The recovery start is held in the state only
//! during recovery; afterwards the snapshot keeps the last one the stack held, until
//! persistent congestion returns it to slow start (cubic.rs:416-420).
//!
//! Virtual time: trace time t is `Timestamp::from_duration(clock_base_us + t)`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Once, OnceLock};
use std::time::Duration;

use num_rational::Ratio;
use s2n_quic_core::event::builder::{BbrState, SlowStartExitCause};
use s2n_quic_core::packet::number::PacketNumberSpace;
use s2n_quic_core::random;
use s2n_quic_core::recovery::bandwidth::{Bandwidth, RateSample};
use s2n_quic_core::recovery::congestion_controller::Publisher;
use s2n_quic_core::recovery::cubic::ApplicationSettings;
use s2n_quic_core::recovery::{CongestionController, CubicCongestionController, RttEstimator};
use s2n_quic_core::time::Timestamp;
use s2n_quic_core::transport::parameters::MaxAckDelay;

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

const CCD_PHASE_UNKNOWN: u32 = 0;
const CCD_PHASE_SLOW_START: u32 = 1;
const CCD_PHASE_CONGESTION_AVOIDANCE: u32 = 2;
const CCD_PHASE_RECOVERY: u32 = 3;

const VERSION: &str = "0.91.0";
const OPTIONS: &str = "mtu=initial|discovered";
// s2n-quic's default initial MTU gives max_datagram_size 1200 (path/mtu.rs:135, 158, 224).
const INITIAL_MDS: u16 = 1200;
// loss::K_PACKET_THRESHOLD (loss.rs:13).
const K_PACKET_THRESHOLD: u64 = 3;

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

/// The connection's event publisher, as the controller sees it (cc.rs:49-63): ccdiff
/// reads state from the controller itself, so every event is dropped.
struct NoopPublisher;

impl Publisher for NoopPublisher {
    fn on_slow_start_exited(&mut self, _cause: SlowStartExitCause, _congestion_window: u32) {}
    fn on_delivery_rate_sampled(&mut self, _rate_sample: RateSample) {}
    fn on_pacing_rate_updated(&mut self, _rate: Bandwidth, _burst: u32, _gain: Ratio<u64>) {}
    fn on_bbr_state_changed(&mut self, _state: BbrState) {}
}

/// on_ack / on_packet_lost take `&mut dyn random::Generator`; CUBIC never draws from it
/// (cubic.rs:293, 396: `_random_generator`).  Zeros, so a use would be deterministic.
struct ZeroRandom;

impl random::Generator for ZeroRandom {
    fn public_random_fill(&mut self, dest: &mut [u8]) {
        dest.fill(0);
    }
    fn private_random_fill(&mut self, dest: &mut [u8]) {
        dest.fill(0);
    }
}

#[derive(Clone, Copy)]
struct Sent {
    time: Timestamp,
    bytes: u32,
}

/// Losses held back until the ACK at the same time (see top).
#[derive(Default)]
struct Pending {
    now_us: i64,
    /// The batch, ascending packet numbers (manager.rs:962: remove_range order).
    lost: Vec<(u64, Sent)>,
    persistent: bool,
}

struct Ctl {
    /// Stack microseconds of trace time 0.
    base_us: u64,
    cc: CubicCongestionController,
    rtt: RttEstimator,
    max_datagram_size: u16,
    /// The recovery manager's sent_packets (manager.rs:252-264): pn -> send time, bytes.
    sent: BTreeMap<u64, Sent>,
    /// largest_acked_packet (manager.rs:444-450).
    largest_acked: Option<u64>,
    pending: Option<Pending>,
    /// The last Recovery(start) the controller held (see top), in trace microseconds.
    last_recovery_us: Option<i64>,
    last_us: i64,
    last_error: CString,
    /// W_max and K as their Debug text read (see DebugRead).
    w_max_read: F32Read,
    k_read: DurationRead,
}

fn slice<'a>(p: *const CcdPacket, n: u32) -> &'a [CcdPacket] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: the harness passes n valid packets (ccdiff_adapter.h).
        unsafe { std::slice::from_raw_parts(p, n as usize) }
    }
}

/// A `Duration`'s Debug ("1.957433s", "957.4ms", "12µs", "0ns") -> microseconds.
fn duration_us(text: &str) -> Option<f64> {
    let t = text.trim();
    for (unit, scale) in [("ns", 1e-3), ("µs", 1.0), ("ms", 1e3), ("s", 1e6)] {
        if let Some(v) = t.strip_suffix(unit) {
            if let Ok(v) = v.parse::<f64>() {
                return Some(v * scale);
            }
        }
    }
    None
}

impl Ctl {
    fn at(&self, us: i64) -> Result<Timestamp, String> {
        let us = u64::try_from(us).map_err(|_| format!("negative time {us} us"))?;
        // SAFETY: from_duration is unsafe only because a Timestamp should come from a
        // Clock (time/timestamp.rs:95-105); this is the adapter's clock: base + trace time,
        // never 0 (clock_base_us >= 1).
        Ok(unsafe { Timestamp::from_duration(Duration::from_micros(self.base_us + us)) })
    }

    /// A Timestamp in trace microseconds (a Timestamp counts microseconds,
    /// time/timestamp.rs:21, 109-131: the number its Debug "H:MM:SS.micros" spells).
    fn trace_us(&self, t: Timestamp) -> i64 {
        // SAFETY: as_duration is unsafe only because the value is opaque to other clocks
        // (time/timestamp.rs:118-127); this is the adapter's clock (see `at`).
        let us = unsafe { t.as_duration() }.as_micros() as u64;
        us as i64 - self.base_us as i64
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
        // (manager.rs:157-181).  Only receive-path events share its instant.
        if let Some(p) = &self.pending {
            let same_burst = p.now_us == ev.now_us
                && matches!(ev.kind, CCD_ACKED | CCD_LOST | CCD_PERSISTENT_CONGESTION);
            // A lost after persistent congestion at the same time is a later loss
            // detection: the collapsed batch goes first (as the ngtcp2 and quinn adapters do).
            let later_detection = ev.kind == CCD_LOST && p.persistent;
            if !same_burst || later_detection {
                let p = self.pending.take().unwrap();
                let at = self.at(p.now_us)?;
                Self::lose(&mut self.cc, &mut self.rtt, at, &p);
            }
        }
        self.last_us = ev.now_us;
        let pkts = slice(ev.packets, ev.n_packets);
        match ev.kind {
            CCD_SENT => self.on_sent(pkts, now)?,
            CCD_LOST => self.on_lost(ev, pkts)?,
            CCD_PERSISTENT_CONGESTION => match &mut self.pending {
                Some(p) if p.now_us == ev.now_us => p.persistent = true,
                _ => return Err("persistent_congestion must follow lost at the same time".into()),
            },
            CCD_ACKED => self.on_acked(ev, pkts, now)?,
            // No controller hook: the next packet's app_limited carries it (see top).
            CCD_APP_IDLE | CCD_APP_DATA => {},
            k => return Err(format!("unknown event kind {k}")),
        }
        match &self.pending {
            Some(p) => {
                // What the loss timer would leave (provisional); the ACK redoes it in order.
                let mut scratch = self.cc.clone();
                let mut rtt = self.rtt;
                let at = self.at(p.now_us)?;
                Self::lose(&mut scratch, &mut rtt, at, p);
                let last = self.track_recovery(&scratch, self.last_recovery_us);
                self.snapshot(&scratch, last, out);
            },
            None => {
                self.last_recovery_us = self.track_recovery(&self.cc, self.last_recovery_us);
                self.snapshot(&self.cc, self.last_recovery_us, out);
            },
        }
        Ok(())
    }

    // Manager::on_packet_sent (manager.rs:216-250), app_limited from application.rs:587-589.
    fn on_sent(&mut self, pkts: &[CcdPacket], now: Timestamp) -> Result<(), String> {
        let [p] = pkts else {
            return Err(format!("CCD_SENT carries {} packets, expected 1", pkts.len()));
        };
        if self.sent.contains_key(&p.pn) {
            return Err(format!("packet {} sent twice", p.pn));
        }
        if p.bytes == 0 {
            return Err(format!("packet {} has 0 bytes", p.pn));
        }
        // path.rs:600-609: the window minus (bytes in flight + this packet) has no room for
        // a max_datagram_size packet.
        let in_flight = self.cc.bytes_in_flight().saturating_add(p.bytes);
        let congestion_limited =
            self.cc.congestion_window().saturating_sub(in_flight) < self.max_datagram_size as u32;
        let app_limited = !congestion_limited && p.app_limited != 0;
        self.cc.on_packet_sent(now, p.bytes as usize, Some(app_limited), &self.rtt, &mut NoopPublisher);
        self.sent.insert(p.pn, Sent { time: now, bytes: p.bytes });
        Ok(())
    }

    // detect_and_remove_lost_packets' batch (manager.rs:832-1061), held back (see top).
    fn on_lost(&mut self, ev: &CcdEvent, pkts: &[CcdPacket]) -> Result<(), String> {
        let p = self.pending.get_or_insert_with(|| Pending { now_us: ev.now_us, ..Default::default() });
        for pk in pkts {
            let s = self.sent.remove(&pk.pn)
                .ok_or_else(|| format!("lost packet {} was never sent or is already gone", pk.pn))?;
            p.lost.push((pk.pn, s));
        }
        p.lost.sort_by_key(|(pn, _)| *pn);
        Ok(())
    }

    /// loss::detect (loss.rs:26-71) as detect_lost_packets applies it (manager.rs:875-909):
    /// a packet below the largest acknowledged is lost when it is K_PACKET_THRESHOLD below
    /// it or was sent at least loss_time_threshold (rtt.rs:376-399) ago.
    fn s2n_detects(&self, p: &Pending, now: Timestamp) -> bool {
        let Some(largest) = self.largest_acked else { return false };
        let threshold = self.rtt.loss_time_threshold();
        p.lost.iter().any(|(pn, s)| {
            *pn < largest && ((s.time + threshold).has_elapsed(now) || largest - pn >= K_PACKET_THRESHOLD)
        })
    }

    /// remove_lost_packets (manager.rs:962-1032): one on_packet_lost per packet, each with
    /// the batch's persistent-congestion flag, new_loss_burst when not contiguous with
    /// the previous one (manager.rs:975-976), at `now`; under persistent congestion the
    /// path's estimator forgets its first sample, so the next one resets min_rtt and
    /// smoothed_rtt (manager.rs:1027-1032, rtt.rs:404-409).
    fn lose(cc: &mut CubicCongestionController, rtt: &mut RttEstimator, now: Timestamp, p: &Pending) {
        let mut prev: Option<u64> = None;
        for (pn, s) in &p.lost {
            let new_burst = prev.is_none_or(|q| pn.checked_sub(q) != Some(1));
            cc.on_packet_lost(s.bytes, (), p.persistent, new_burst, &mut ZeroRandom, now, &mut NoopPublisher);
            if p.persistent {
                rtt.on_persistent_congestion();
            }
            prev = Some(*pn);
        }
    }

    // Manager::process_acks (manager.rs:420-486).
    fn on_acked(&mut self, ev: &CcdEvent, pkts: &[CcdPacket], now: Timestamp) -> Result<(), String> {
        let spurious = slice(ev.spurious, ev.n_spurious);
        // The frame's largest acknowledged: the largest newly acked or re-acked packet.
        let frame_largest = pkts.iter().chain(spurious).map(|p| p.pn).max();
        // 1. sent_packets.remove_range (manager.rs:526).  A packet declared lost is gone
        // from sent_packets: its late ACK does nothing (no undo in s2n).
        let mut acked: Vec<(u64, Sent)> = Vec::with_capacity(pkts.len());
        for p in pkts {
            let s = self.sent.remove(&p.pn)
                .ok_or_else(|| format!("acked packet {} was never sent or is already gone", p.pn))?;
            acked.push((p.pn, s));
        }
        // 2. manager.rs:444-450.
        let mut new_largest = false;
        if let Some(l) = frame_largest {
            if self.largest_acked.is_none_or(|cur| cur <= l) {
                self.largest_acked = Some(l);
                new_largest = true;
            }
        }
        // manager.rs:459: nothing newly acked, nothing more (no loss detection, no ECN;
        // a pending loss is committed by a later frame or event).
        let Some(&(largest_pn, largest)) = acked.iter().max_by_key(|(pn, _)| *pn) else {
            return Ok(());
        };
        // 3. update_congestion_control (manager.rs:581-625): the sample only when the
        // frame's largest acknowledged is this frame's largest newly acked.
        if Some(largest_pn) == frame_largest {
            let ack_delay = Duration::from_micros(ev.ack_delay_us.max(0) as u64);
            let latest = now.saturating_duration_since(largest.time);
            self.rtt.update_rtt(ack_delay, latest, now, true, PacketNumberSpace::ApplicationData);
            self.cc.on_rtt_update(largest.time, now, &self.rtt, &mut NoopPublisher);
        }
        // 4. process_new_acked_packets: loss detection first (manager.rs:644).  The
        // held-back batch is applied in the frame after which s2n's own rule finds it lost.
        let reveals = match &self.pending {
            Some(p) if p.now_us == ev.now_us => self.s2n_detects(p, now),
            _ => false,
        };
        if reveals {
            let p = self.pending.take().unwrap();
            Self::lose(&mut self.cc, &mut self.rtt, now, &p);
        }
        // manager.rs:718-726, 766-779: ECN only on a frame with a new largest.
        if ev.flags & CCD_FLAG_ECN_CE != 0 && new_largest {
            self.cc.on_explicit_congestion(1, now, &mut NoopPublisher);
        }
        // manager.rs:728-741: one on_ack for the frame's bytes.
        let bytes: usize = acked.iter().map(|(_, s)| s.bytes as usize).sum();
        self.cc.on_ack(largest.time, bytes, (), &self.rtt, &mut ZeroRandom, now, &mut NoopPublisher);
        Ok(())
    }

    /// The last recovery start the controller held (see top).
    fn track_recovery(&self, cc: &CubicCongestionController, last: Option<i64>) -> Option<i64> {
        match cc.ccdiff_state() {
            (1, Some(start), ..) => Some(self.trace_us(start)),
            (0, ..) => None,
            _ => last,
        }
    }

    fn snapshot(&self, cc: &CubicCongestionController, recovery: Option<i64>, out: &mut CcdSnapshot) {
        let (state, time, threshold, w_max, k, mds) = cc.ccdiff_state();
        out.cwnd = cc.congestion_window() as u64;
        out.bytes_in_flight = cc.bytes_in_flight() as u64;
        out.reserved = 0;
        // HybridSlowStart.threshold is s2n's ssthresh (f32::MAX until set, hss.rs:77).
        out.ssthresh = if threshold < f32::MAX { threshold as u64 } else { CCD_NONE };
        out.phase = match state {
            0 => CCD_PHASE_SLOW_START,
            1 => CCD_PHASE_RECOVERY,
            2 => CCD_PHASE_CONGESTION_AVOIDANCE,
            _ => CCD_PHASE_UNKNOWN,
        };
        out.recovery_start_us = recovery.unwrap_or(CCD_NO_TIME);
        // CongestionAvoidanceTiming.start_time: t = now - start_time (cubic.rs:109).
        out.epoch_start_us = match (state, time) {
            (2, Some(start)) => self.trace_us(start),
            _ => CCD_NO_TIME,
        };
        // Cubic { w_max (packets), k: Duration, max_datagram_size } (cubic.rs:703-717).
        out.w_max_bytes = self.w_max_read.get(w_max.to_bits()) * mds as f64;
        out.k_us = self.k_read.get(k);
    }
}

/// The number the adapter read from a value's Debug text (before the facade), kept for
/// the last value: W_max is an f32 that Debug prints shortest (0.7 for 0.699999988..)
/// and that was read back as an f64; K a Duration printed in its own unit ("1.957433s")
/// and scaled.  Both change only on a congestion event: one formatting each per change.
struct DebugRead<T: Copy + PartialEq, F: Fn(T) -> f64> {
    last: Cell<Option<(T, f64)>>,
    read: F,
}

impl<T: Copy + PartialEq, F: Fn(T) -> f64> DebugRead<T, F> {
    fn new(read: F) -> Self {
        Self { last: Cell::new(None), read }
    }

    fn get(&self, value: T) -> f64 {
        match self.last.get() {
            Some((v, read)) if v == value => read,
            _ => {
                let read = (self.read)(value);
                self.last.set(Some((value, read)));
                read
            },
        }
    }
}

type F32Read = DebugRead<u32, fn(u32) -> f64>;
type DurationRead = DebugRead<Duration, fn(Duration) -> f64>;

/// An f32's Debug read as an f64 (NaN if it did not parse, as before).  Keyed by the
/// bits: 0.0 and -0.0 print differently.
fn f32_debug_as_f64(bits: u32) -> f64 {
    format!("{:?}", f32::from_bits(bits)).parse::<f64>().unwrap_or(f64::NAN)
}

fn duration_debug_us(k: Duration) -> f64 {
    duration_us(&format!("{k:?}")).unwrap_or(f64::NAN)
}

fn parse_options(s: &str) -> Result<bool, String> {
    let mut discovered = false;
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or(format!("option {item:?} is not key=value; accepted: {OPTIONS}"))?;
        match k.trim() {
            "mtu" => {
                discovered = match v {
                    "initial" => false,
                    "discovered" => true,
                    _ => return Err(format!("option {k}: unknown value {v:?}; accepted: {OPTIONS}")),
                }
            },
            _ => return Err(format!("unknown option {k:?}; accepted: {OPTIONS}")),
        }
    }
    Ok(discovered)
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
        // hss.rs:62-64, 198-203: HyStart++ only when this variable is set (read once).
        let pp = if std::env::var_os("S2N_UNSTABLE_USE_HYSTART_PP").is_some() { "on" } else { "off" };
        CString::new(format!(
            "s2n-quic-core {VERSION} cubic; options: {OPTIONS}; hystart++ {pp}; {}",
            build_checks()
        ))
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

/// The peer's max_ack_delay transport parameter from ccd_config's microseconds: the
/// parameter is whole milliseconds on the wire (RFC 9000 §18.2), as s2n keeps it.
fn peer_max_ack_delay(us: u32) -> Result<MaxAckDelay, String> {
    MaxAckDelay::try_from(Duration::from_micros(us as u64))
        .map_err(|_| format!("max_ack_delay_us {us} is not a max_ack_delay s2n-quic accepts"))
}

fn open(cfg: *const CcdConfig) -> Result<Box<Ctl>, String> {
    // SAFETY: the harness passes a valid config (or NULL, rejected here).
    let cfg = unsafe { cfg.as_ref() }.ok_or("config is NULL")?;
    let opts = if cfg.options.is_null() {
        ""
    } else {
        unsafe { CStr::from_ptr(cfg.options) }.to_str().map_err(|_| "options are not UTF-8")?
    };
    let discovered = parse_options(opts)?;
    let mds = u16::try_from(cfg.max_datagram_size)
        .ok()
        .filter(|&m| m >= INITIAL_MDS)
        .ok_or(format!("max_datagram_size {} is not in 1200..65535", cfg.max_datagram_size))?;
    if cfg.clock_base_us <= 0 || cfg.clock_base_us > CCD_MAX_CLOCK_BASE_US {
        return Err(format!("clock_base_us {} is not in 1..{CCD_MAX_CLOCK_BASE_US}", cfg.clock_base_us));
    }
    // The path's estimator starts from the endpoint's initial RTT (default 333 ms,
    // DEFAULT_INITIAL_RTT); the trace header's value stands for it.  s2n debug_asserts
    // initial_rtt >= MIN_RTT (1 ms, rtt.rs:73-74).
    let initial_rtt = if cfg.initial_rtt_us >= 1000 {
        Duration::from_micros(cfg.initial_rtt_us as u64)
    } else {
        Duration::from_millis(333)
    };
    let mut rtt = RttEstimator::new(initial_rtt);
    // The peer's max_ack_delay as the connection sets it once the transport parameters
    // arrive: the trace header's (ccd_config.max_ack_delay_us), 25 ms by default.
    rtt.on_max_ack_delay(peer_max_ack_delay(cfg.max_ack_delay_us)?);
    // Endpoint::new_congestion_controller(PathInfo) -> CubicCongestionController::new(
    // max_datagram_size, app_settings) (cubic.rs:890-898, 501-519); default settings:
    // initial window min(10 x mds, max(14720, 2 x mds)) (cubic.rs:531-544).
    let build_mds = if discovered { INITIAL_MDS } else { mds };
    let mut cc = CubicCongestionController::new(build_mds, ApplicationSettings::default());
    if discovered && mds != INITIAL_MDS {
        // MTU probing's probe acknowledged (manager.rs:548-559 -> mtu controller ->
        // on_mtu_update, cubic.rs:458-469).
        cc.on_mtu_update(mds, &mut NoopPublisher);
    }
    Ok(Box::new(Ctl {
        base_us: cfg.clock_base_us as u64,
        cc,
        rtt,
        max_datagram_size: mds,
        sent: BTreeMap::new(),
        largest_acked: None,
        pending: None,
        last_recovery_us: None,
        last_us: 0,
        last_error: CString::default(),
        w_max_read: DebugRead::new(f32_debug_as_f64),
        k_read: DebugRead::new(duration_debug_us),
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
        .unwrap_or_else(|_| Err(format!("s2n-quic panicked: {}", panic_message())));
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
