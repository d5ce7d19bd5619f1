//! ccdiff facade over quiche's legacy congestion controller.
//!
//! NOT upstream code: ccdiff's patches/apply.py copies this file into
//! src/recovery/congestion/ and declares it as a child module of cubic.rs
//! (so it may read cubic::State and Congestion's private fields), compiled
//! only with quiche's "internal" feature.  It adds no logic: each method
//! forwards to exactly one upstream hook or reads one upstream field.  The
//! order in which the hooks are called (what recovery.rs does) lives in the
//! adapter crate (implementations/quiche/adapter/src/lib.rs).

#![allow(missing_docs)]

use std::time::Duration;
use std::time::Instant;

use crate::recovery::congestion::recovery::Acked;
use crate::recovery::congestion::Congestion;
use crate::recovery::rtt::RttStats;
use crate::recovery::RecoveryConfig;
use crate::recovery::Sent;
use crate::CongestionControlAlgorithm;

/// The quiche version this facade was compiled into.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Whether this quiche has RecoveryConfig.enable_cubic_idle_restart_fix.
pub const HAS_IDLE_FIX: bool = true; // ccdiff:idle_fix
pub const HAS_IDLE_FIX: bool = false; // ccdiff:no_idle_fix

pub struct Settings {
    pub reno: bool,
    pub hystart: bool,
    /// Ignored when HAS_IDLE_FIX is false.
    pub idle_fix: bool,
    pub max_datagram_size: usize,
    pub initial_rtt: Duration,
    pub max_ack_delay: Duration,
    pub initial_congestion_window_packets: usize,
}

/// quiche's per-path congestion state (recovery/congestion/mod.rs).
pub struct Cc {
    cc: Congestion,
}

/// One sent packet as quiche records it (recovery/mod.rs `Sent`).
pub struct SentPacket(Sent);

/// quiche's RTT estimator (recovery/rtt.rs).
pub struct Rtt(RttStats);

impl Cc {
    pub fn new(s: &Settings) -> Cc {
        #[allow(unused_variables)]
        let idle_fix = s.idle_fix;
        let cfg = RecoveryConfig {
            initial_rtt: s.initial_rtt,
            max_send_udp_payload_size: s.max_datagram_size,
            max_ack_delay: s.max_ack_delay,
            cc_algorithm: if s.reno {
                CongestionControlAlgorithm::Reno
            } else {
                CongestionControlAlgorithm::CUBIC
            },
            custom_bbr_params: None,
            hystart: s.hystart,
            pacing: true, // Config default; not read by the congestion module
            max_pacing_rate: None,
            initial_congestion_window_packets: s
                .initial_congestion_window_packets,
            enable_relaxed_loss_threshold: false,
            enable_cubic_idle_restart_fix: idle_fix, // ccdiff:idle_fix
        };
        Cc {
            cc: Congestion::from_config(&cfg),
        }
    }

    /// Congestion::on_packet_sent for an in-flight, ack-eliciting packet;
    /// returns the packet record it filled in (delivery-rate fields).
    pub fn on_packet_sent(
        &mut self, bytes_in_flight: usize, pkt_num: u64, size: usize,
        now: Instant, bytes_lost: u64,
    ) -> SentPacket {
        let mut pkt = Sent {
            pkt_num,
            frames: Default::default(),
            time_sent: now,
            time_acked: None,
            time_lost: None,
            size,
            ack_eliciting: true,
            in_flight: true,
            delivered: 0,
            delivered_time: now,
            first_sent_time: now,
            is_app_limited: false,
            tx_in_flight: 0,
            lost: 0,
            has_data: true,
            is_pmtud_probe: false,
        };
        self.cc
            .on_packet_sent(bytes_in_flight, size, now, &mut pkt, bytes_lost, true);
        SentPacket(pkt)
    }

    /// Congestion::on_packets_acked; the Acked records are built as
    /// RecoveryEpoch::detect_and_remove_acked_packets builds them.
    pub fn on_packets_acked(
        &mut self, bytes_in_flight: usize, pkts: &[&SentPacket], rtt: &Rtt,
        now: Instant,
    ) {
        let mut acked: Vec<Acked> = pkts
            .iter()
            .map(|p| Acked {
                pkt_num: p.0.pkt_num,
                time_sent: p.0.time_sent,
                size: p.0.size,
                rtt: now.saturating_duration_since(p.0.time_sent),
                delivered: p.0.delivered,
                delivered_time: p.0.delivered_time,
                first_sent_time: p.0.first_sent_time,
                is_app_limited: p.0.is_app_limited,
            })
            .collect();
        self.cc
            .on_packets_acked(bytes_in_flight, &mut acked, &rtt.0, now);
    }

    pub fn in_congestion_recovery(&self, sent_time: Instant) -> bool {
        self.cc.in_congestion_recovery(sent_time)
    }

    pub fn checkpoint(&mut self) {
        (self.cc.cc_ops.checkpoint)(&mut self.cc)
    }

    pub fn congestion_event(
        &mut self, bytes_in_flight: usize, lost_bytes: usize,
        largest_lost: &SentPacket, now: Instant,
    ) {
        (self.cc.cc_ops.congestion_event)(
            &mut self.cc,
            bytes_in_flight,
            lost_bytes,
            &largest_lost.0,
            now,
        )
    }

    pub fn rollback(&mut self) -> bool {
        (self.cc.cc_ops.rollback)(&mut self.cc)
    }

    pub fn add_lost_count(&mut self, n: usize) {
        self.cc.lost_count += n;
    }

    pub fn update_app_limited(&mut self, v: bool) {
        self.cc.update_app_limited(v)
    }

    pub fn delivery_rate_update_app_limited(&mut self, v: bool) {
        self.cc.delivery_rate.update_app_limited(v)
    }

    pub fn congestion_window(&self) -> usize {
        self.cc.congestion_window
    }

    /// usize::MAX while in the initial slow start.
    pub fn ssthresh(&self) -> usize {
        self.cc.ssthresh.get()
    }

    pub fn congestion_recovery_start_time(&self) -> Option<Instant> {
        self.cc.congestion_recovery_start_time
    }

    pub fn app_limited(&self) -> bool {
        self.cc.app_limited
    }

    pub fn hystart_in_css(&self) -> bool {
        self.cc.hystart.in_css()
    }

    pub fn hystart_css_start_time(&self) -> Option<Instant> {
        self.cc.hystart.css_start_time()
    }

    /// cubic::State.w_max, in bytes (0.0 until first set).
    pub fn cubic_w_max(&self) -> f64 {
        self.cc.cubic_state.w_max
    }

    /// cubic::State.k, in seconds.
    pub fn cubic_k(&self) -> f64 {
        self.cc.cubic_state.k
    }
}

impl SentPacket {
    pub fn time_sent(&self) -> Instant {
        self.0.time_sent
    }
}

impl Rtt {
    pub fn new(initial_rtt: Duration, max_ack_delay: Duration) -> Rtt {
        Rtt(RttStats::new(initial_rtt, max_ack_delay))
    }

    pub fn update_rtt(
        &mut self, latest_rtt: Duration, ack_delay: Duration, now: Instant,
        handshake_confirmed: bool,
    ) {
        self.0
            .update_rtt(latest_rtt, ack_delay, now, handshake_confirmed)
    }

    pub fn latest_rtt(&self) -> Duration {
        self.0.latest_rtt
    }

    /// The windowed minimum (initial_rtt before the first sample).
    pub fn min_rtt(&self) -> Duration {
        *self.0.min_rtt
    }

    pub fn smoothed_rtt(&self) -> Duration {
        self.0.smoothed_rtt
    }
}
