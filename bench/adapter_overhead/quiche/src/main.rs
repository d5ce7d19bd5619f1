//! quiche's congestion controller called directly, no adapter: the same
//! `quiche::ccdiff_internal` calls (the facade in
//! implementations/quiche/patches/ccdiff_internal.rs), in the same order and
//! with the same arguments, that implementations/quiche/adapter/src/lib.rs
//! makes for this event stream (default options: cubic or reno, hystart on,
//! idle fix on, app_limited=conn).
//!
//!     quiche_bare EVENTS.bin REPS [reno]
//!
//! Built with cargo --release against the same patched quiche, with the
//! adapter crate's release profile (bench/adapter_overhead/build.sh).
//! What the adapter does on top, and this loop does not:
//! - the ABI: an extern "C" call into the .so, catch_unwind around every
//!   step, raw-pointer to slice conversion, option/kind checks, and the
//!   snapshot written after every event (phase, recovery/epoch start
//!   converted back to trace microseconds, W_max, K);
//! - its packet store is a HashMap<u64, SentPacket> (SipHash) and it
//!   allocates two Vecs per ACK; here a VecDeque indexed by packet number
//!   (like quiche's own sent-packet queue) and no allocation of our own.
//! Both pay for what the facade does inside quiche (e.g. the Vec<Acked> it
//! builds in on_packets_acked).  The stream (bench_adapters.py) has no
//! spurious loss or persistent congestion; this loop stops on them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use quiche::ccdiff_internal as q;

const SENT: u32 = 1;
const ACKED: u32 = 2;
const LOST: u32 = 3;

struct Packet {
    pn: u64,
    sent_us: i64,
    bytes: u32,
    app_limited: u32,
}

struct Event {
    kind: u32,
    now_us: i64,
    bytes_in_flight: u64,
    first: usize, // index of its first packet
    n: usize,
    n_spurious: usize,
    ack_delay_us: i64,
}

/// The CCDEVT01 file written by bench_adapters.py (format in ../events.h).
fn load(path: &str) -> (Vec<Event>, Vec<Packet>) {
    let b = std::fs::read(path).expect("cannot read event file");
    assert_eq!(&b[..8], b"CCDEVT01", "not a CCDEVT01 file");
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (n, np) = (u64_at(8) as usize, u64_at(16) as usize);
    let mut events = Vec::with_capacity(n);
    let mut first = 0;
    for i in 0..n {
        let o = 24 + 72 * i;
        let (cnt, spur) = (u32_at(o + 24) as usize, u32_at(o + 28) as usize);
        events.push(Event {
            kind: u32_at(o),
            now_us: u64_at(o + 8) as i64,
            bytes_in_flight: u64_at(o + 16),
            first,
            n: cnt,
            n_spurious: spur,
            ack_delay_us: u64_at(o + 32) as i64,
        });
        first += cnt + spur;
    }
    assert_eq!(first, np, "packet count mismatch");
    let base = 24 + 72 * n;
    let packets = (0..np)
        .map(|i| {
            let o = base + 24 * i;
            Packet { pn: u64_at(o), sent_us: u64_at(o + 8) as i64, bytes: u32_at(o + 16), app_limited: u32_at(o + 20) }
        })
        .collect();
    (events, packets)
}

struct Bare {
    base: Instant,
    cc: q::Cc,
    rtt: q::Rtt,
    sent: VecDeque<Option<q::SentPacket>>, // slot i is packet number sent_base + i
    sent_base: u64,
    largest_acked: Option<u64>,
}

impl Bare {
    fn new(reno: bool) -> Bare {
        // The adapter's defaults (lib.rs parse_options / open) for a trace
        // with max_datagram_size 1200 and initial RTT 333 ms.
        let st = q::Settings {
            reno,
            hystart: true,
            idle_fix: q::HAS_IDLE_FIX,
            max_datagram_size: 1200,
            initial_rtt: Duration::from_micros(333_000),
            max_ack_delay: Duration::from_millis(25),
            initial_congestion_window_packets: 10,
        };
        Bare {
            base: Instant::now(),
            cc: q::Cc::new(&st),
            rtt: q::Rtt::new(st.initial_rtt, st.max_ack_delay),
            sent: VecDeque::new(),
            sent_base: 0,
            largest_acked: None,
        }
    }

    fn take(&mut self, pn: u64) -> q::SentPacket {
        let rec = self.sent[(pn - self.sent_base) as usize].take().expect("packet not in flight");
        while let Some(None) = self.sent.front() {
            self.sent.pop_front();
            self.sent_base += 1;
        }
        rec
    }

    fn run(&mut self, events: &[Event], packets: &[Packet]) {
        for ev in events {
            let now = self.base + Duration::from_micros(ev.now_us as u64);
            let pkts = &packets[ev.first..ev.first + ev.n];
            let bif = ev.bytes_in_flight as usize;
            match ev.kind {
                SENT => {
                    let p = &pkts[0];
                    if p.app_limited != 0 {
                        self.cc.delivery_rate_update_app_limited(true);
                    }
                    let rec = self.cc.on_packet_sent(bif, p.pn, p.bytes as usize, now, 0);
                    self.cc.update_app_limited(false);
                    if self.sent.is_empty() {
                        self.sent_base = p.pn;
                    }
                    assert_eq!(p.pn, self.sent_base + self.sent.len() as u64, "packet numbers not dense");
                    self.sent.push_back(Some(rec));
                },
                LOST => {
                    let last = pkts.last().expect("empty loss");
                    let lost_bytes: usize = pkts.iter().map(|p| p.bytes as usize).sum();
                    let largest = self.take(last.pn);
                    if !self.cc.in_congestion_recovery(largest.time_sent()) {
                        self.cc.checkpoint();
                    }
                    self.cc.congestion_event(bif, lost_bytes, &largest, now);
                    self.cc.add_lost_count(pkts.len());
                    for p in &pkts[..pkts.len() - 1] {
                        self.take(p.pn);
                    }
                },
                ACKED => {
                    assert!(ev.n_spurious == 0 && !pkts.is_empty(), "unsupported ACK");
                    let largest = pkts.last().unwrap();
                    let largest_acked = self.largest_acked.map_or(largest.pn, |l| l.max(largest.pn));
                    self.largest_acked = Some(largest_acked);
                    if largest.pn == largest_acked {
                        let sent_at = self.base + Duration::from_micros(largest.sent_us as u64);
                        let ack_delay = Duration::from_micros(ev.ack_delay_us.max(0) as u64);
                        self.rtt.update_rtt(now.saturating_duration_since(sent_at), ack_delay, now, true);
                    }
                    match pkts {
                        [a] => {
                            let a = self.take(a.pn);
                            self.cc.on_packets_acked(bif, &[&a], &self.rtt, now);
                        },
                        [a, b] => {
                            let (a, b) = (self.take(a.pn), self.take(b.pn));
                            self.cc.on_packets_acked(bif, &[&a, &b], &self.rtt, now);
                        },
                        _ => {
                            let recs: Vec<q::SentPacket> = pkts.iter().map(|p| self.take(p.pn)).collect();
                            let refs: Vec<&q::SentPacket> = recs.iter().collect();
                            self.cc.on_packets_acked(bif, &refs, &self.rtt, now);
                        },
                    }
                },
                k => panic!("unsupported event kind {k}"),
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert!(args.len() >= 3, "usage: quiche_bare EVENTS.bin REPS [reno]");
    let (events, packets) = load(&args[1]);
    let reps: usize = args[2].parse().expect("REPS");
    let reno = args.get(3).is_some_and(|a| a == "reno");
    let mut best = f64::INFINITY;
    let (mut cwnd, mut ssthresh) = (0u64, 0u64);
    for _ in 0..reps {
        let mut b = Bare::new(reno);
        let t0 = Instant::now();
        b.run(&events, &packets);
        best = best.min(t0.elapsed().as_secs_f64());
        cwnd = b.cc.congestion_window() as u64;
        let s = b.cc.ssthresh();
        ssthresh = if s == usize::MAX { u64::MAX } else { s as u64 };
    }
    println!(
        "{{\"events\": {}, \"seconds\": {:.6}, \"events_per_s\": {:.0}, \"cwnd\": {}, \"ssthresh\": {}}}",
        events.len(), best, events.len() as f64 / best, cwnd, ssthresh
    );
}
