"""A finding's minimal trace as a Rust test for s2n-quic's own suite (issue 30 item 7).

The test goes into s2n-quic-core's src/recovery/cubic/tests.rs, next to s2n's own CUBIC
tests (which build a `CubicCongestionController`, an `RttEstimator` and a `PathPublisher`
the same way).  It holds the trace as a table of literal events and a driver that calls the
public `CongestionController` trait in the order s2n-quic's recovery `Manager` does -- the
order of ccdiff's adapter (implementations/s2n-quic/adapter/src/lib.rs, whose comments cite
s2n-quic-transport's manager.rs and application.rs):

  send: `on_packet_sent(now, bytes, Some(app_limited), &rtt)`, app_limited = the sender had
        nothing more to send and the window still has room for a datagram
        (application.rs:587-589, path.rs:600-609);
  ACK:  the RTT sample when the frame's largest is newly acknowledged (`update_rtt`, then
        `on_rtt_update`); loss detection first -- the losses s2n's rule finds after this ACK,
        one `on_packet_lost` per packet; ECN-CE; then one `on_ack` for the frame's bytes
        (manager.rs:571-741);
  loss no ACK at its instant reveals: the loss timer's `on_packet_lost`s at its instant.

After the event where the finding breaks the rule, the invariant's assertion fails.
"""
from __future__ import annotations

import re

from .unit_test import NotExpressible, find_violation, idle_inflation_check, rust_event_table, wrap_lines

SENT_, ACK_, LOST_ = 1, 2, 3

DRIVER = r"""
        use std::collections::HashMap;
        let mut publisher = event::testing::Publisher::no_snapshot();
        let mut publisher = PathPublisher::new(&mut publisher, path::Id::test_id());
        let mut random = random::testing::Generator::default();
        let mds: u16 = {mds};
        // s2n's clock at trace time 0: ccdiff's base (Timestamp::from_duration, as a Clock would).
        let at = |us: u64| unsafe { Timestamp::from_duration(Duration::from_micros({base_us} + us)) };
        let mut rtt = RttEstimator::new(Duration::from_micros({initial_rtt_us}));
        rtt.on_max_ack_delay(crate::transport::parameters::MaxAckDelay::default());
        let mut cc = CubicCongestionController::new(mds, ApplicationSettings::default());
        let mut sent: HashMap<u64, (Timestamp, u32)> = HashMap::new();
        let mut largest_acked: Option<u64> = None;
        // Losses declared and not yet handed to the controller: (t_us, [(pn, sent, bytes)]).
        let mut pending: Option<(u64, Vec<(u64, Timestamp, u32)>)> = None;
        // remove_lost_packets (manager.rs:962-1032): one on_packet_lost per packet.
        fn lose<P: Publisher>(cc: &mut CubicCongestionController, now: Timestamp, lost: &[(u64, Timestamp, u32)],
                              random: &mut dyn random::Generator, publisher: &mut P) {
            let mut prev: Option<u64> = None;
            for &(pn, _, bytes) in lost {
                let new_burst = prev.map_or(true, |q| pn.checked_sub(q) != Some(1));
                cc.on_packet_lost(bytes, (), false, new_burst, random, now, publisher);
                prev = Some(pn);
            }
        }
        for &(event, kind, t, pns, bytes, ack_delay, flag) in EVENTS {
            let now = at(t);
            if pending.as_ref().map_or(false, |p| p.0 != t || !(kind == ACK || kind == LOST)) {
                // No ACK at its instant revealed it: the loss timer (manager.rs:157-181).
                let (lost_t, mut lost) = pending.take().unwrap();
                lost.sort_by_key(|l| l.0);
                lose(&mut cc, at(lost_t), &lost, &mut random, &mut publisher);
            }
            match kind {
                SENT => {
                    let in_flight = cc.bytes_in_flight().saturating_add(bytes as u32);
                    let congestion_limited = cc.congestion_window().saturating_sub(in_flight) < mds as u32;
                    cc.on_packet_sent(now, bytes as usize, Some(!congestion_limited && flag), &rtt, &mut publisher);
                    sent.insert(pns[0], (now, bytes as u32));
                }
                LOST => {
                    let p = pending.get_or_insert_with(|| (t, Vec::new()));
                    for &pn in pns {
                        let (time, size) = sent.remove(&pn).unwrap();
                        p.1.push((pn, time, size));
                    }
                }
                ACK => {
                    let frame_largest = *pns.iter().max().unwrap();
                    let acked: Vec<(u64, Timestamp, u32)> =
                        pns.iter().map(|pn| { let (time, size) = sent.remove(pn).unwrap(); (*pn, time, size) }).collect();
                    let new_largest = largest_acked.map_or(true, |l| l <= frame_largest);
                    if new_largest {
                        largest_acked = Some(frame_largest); // manager.rs:444-450
                    }
                    let &(largest_pn, largest_sent, _) = acked.iter().max_by_key(|a| a.0).unwrap();
                    if largest_pn == frame_largest { // update_congestion_control, manager.rs:581-625
                        let latest = now.saturating_duration_since(largest_sent);
                        rtt.update_rtt(Duration::from_micros(ack_delay), latest, now, true, PacketNumberSpace::ApplicationData);
                        cc.on_rtt_update(largest_sent, now, &rtt, &mut publisher);
                    }
                    // loss::detect (loss.rs:26-71): packet or time threshold, before on_ack (manager.rs:644).
                    let threshold = rtt.loss_time_threshold();
                    let reveals = pending.as_ref().map_or(false, |p| {
                        p.0 == t && p.1.iter().any(|&(pn, time, _)| {
                            pn < largest_acked.unwrap()
                                && ((time + threshold).has_elapsed(now) || largest_acked.unwrap() - pn >= 3)
                        })
                    });
                    if reveals {
                        let (_, mut lost) = pending.take().unwrap();
                        lost.sort_by_key(|l| l.0);
                        lose(&mut cc, now, &lost, &mut random, &mut publisher);
                    }
                    if flag && new_largest { // manager.rs:718-726
                        cc.on_explicit_congestion(1, now, &mut publisher);
                    }
                    let total: usize = acked.iter().map(|a| a.2 as usize).sum();
                    cc.on_ack(largest_sent, total, (), &rtt, &mut random, now, &mut publisher);
                }
                _ => {} // app_idle / app_data: no controller hook (the next send's app_limited)
            }
{checks}        }
"""


def s2n_test(trace, invariant: str, name: str, comment: str = "", finding=None, spec: str = "s2n-quic") -> str:
    """The Rust #[test] for s2n-quic-core's src/recovery/cubic/tests.rs, or KeyError (no
    assertion for this invariant) / NotExpressible."""
    from ..clock import DEFAULT_CLOCK_BASE_US
    from ..invariants import CATALOG
    from ..stacks import load_recipes, resolve
    if invariant != "idle-inflation":
        raise KeyError(invariant)
    target = resolve(spec, load_recipes())
    if target.recipe is None or target.recipe.name != "s2n-quic" or target.options:
        raise NotExpressible(f"{spec}: the test drives s2n-quic's CUBIC built with the trace's datagram size")
    if finding is None:
        finding = find_violation(trace, invariant, spec)
    resolved, rows = rust_event_table(trace, app_events=False)
    mds = trace.header.max_datagram_size
    at, bound, why = idle_inflation_check(trace, resolved, finding, mds)
    inv = CATALOG[invariant]
    fn = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    out = [f"// {line}" for line in (comment or "").splitlines()]
    out += [f"// {why}."]
    out += [f"// {inv.quote_from}:"] + [f"//   {line}" for line in wrap_lines(f'"{inv.quote}"')]
    out += ["#[test]", f"fn {fn}() {{",
            f"    const SENT: u8 = {SENT_};", f"    const ACK: u8 = {ACK_};", f"    const LOST: u8 = {LOST_};",
            "    // (trace event, kind, t (us), packet numbers, bytes sent, ACK delay (us),",
            "    //  SENT: the application had nothing more to send / ACK: ECN-CE)",
            "    const EVENTS: &[(usize, u8, u64, &[u64], u64, u64, bool)] = &["]
    for index, kind, t, pns, size, delay, flag in rows:
        out.append(f"        ({index}, {kind}, {t}, &[{', '.join(str(p) for p in pns)}], {size}, {delay}, "
                   f"{'true' if flag else 'false'}),")
    out.append("    ];")
    checks = (f"            if event == {at} {{\n"
              f"                // {finding.detail}\n"
              f"                assert!(\n"
              f"                    cc.congestion_window() <= {bound},\n"
              f"                    \"event {at} (t = {trace.events[at].t} us): cwnd {{}} after the first round trip "
              f"after the idle, above {bound} (RFC 9438 §4.2: t excludes the idle period)\",\n"
              f"                    cc.congestion_window(),\n"
              f"                );\n"
              f"            }}\n")
    driver = DRIVER
    for key, value in {"mds": mds, "base_us": DEFAULT_CLOCK_BASE_US,
                       "initial_rtt_us": trace.header.initial_rtt_us, "checks": checks}.items():
        driver = driver.replace("{" + key + "}", str(value))
    # The driver is written for a function body indented by 8; the test's body is by 4.
    out.append("\n".join(line[4:] if line.startswith("    ") else line for line in driver.strip("\n").splitlines()))
    out.append("}")
    return "\n".join(out) + "\n"
