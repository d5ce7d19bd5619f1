"""A finding's minimal trace as a Rust test for quinn-proto's own suite (issue 30 item 7).

The test goes into the `tests` module of quinn-proto's src/congestion/cubic.rs, next to
quinn's own (`congestion_avoidance_does_not_overflow_after_long_lossless_period` drives
`Cubic::on_ack` with an `RttEstimator` the same way).  It holds the trace as a table of
literal events and a small driver that calls the public `congestion::Controller` trait in
the order quinn's `Connection` does -- the order of ccdiff's adapter
(implementations/quinn/adapter/src/lib.rs, whose comments cite connection/mod.rs):

  send: `on_sent`; the connection's app_limited flag is the send's (mod.rs:947);
  app_idle / app_data: app_limited true / false;
  ACK:  each newly acknowledged packet ascending, `on_ack(now, sent, bytes, app_limited, &rtt)`
        with the estimate from before the ACK; `on_end_acks(now, in_flight, app_limited,
        largest_acked)`; the RTT sample (`RttEstimator::update`); the losses quinn's detection
        finds after that ACK, one `on_congestion_event` per batch (mod.rs:1556, 1803-1812);
        ECN-CE with a new largest: `on_congestion_event(now, largest_sent, false, 0)`;
  loss no ACK at its instant reveals: the loss timer's `on_congestion_event` at its instant.

After the event where the finding breaks the rule, the invariant's assertion fails.
"""
from __future__ import annotations

import re

from .unit_test import NotExpressible, find_violation, idle_inflation_check, rust_event_table, wrap_lines

SENT_, ACK_, LOST_, APP_IDLE_, APP_DATA_ = 1, 2, 3, 5, 6

DRIVER = r"""
        use std::collections::HashMap;
        let mds: u64 = {mds};
        // quinn's clock at trace time 0: the adapter's base (any Instant: Cubic reads durations).
        let base = Instant::now() + Duration::from_micros({base_us});
        let at = |us: u64| base + Duration::from_micros(us);
        // ccdiff's adapter creates the controller 1 us before trace time 0 (Cubic::new ignores it).
        let mut cc = Cubic::new(Arc::new(CubicConfig::default()), base - Duration::from_micros(1), mds as u16);
        let mut rtt = RttEstimator::new(Duration::from_micros({initial_rtt_us}));
        let mut app_limited = false;
        let mut sent: HashMap<u64, (Instant, u64)> = HashMap::new();
        let mut in_flight: u64 = 0;
        let mut largest_acked: Option<u64> = None;
        let mut largest_acked_sent: Option<Instant> = None;
        // Losses declared and not yet handed to the controller: (t_us, [(pn, sent)], bytes, largest's sent).
        let mut pending: Option<(u64, Vec<(u64, Instant)>, u64, Option<Instant>)> = None;
        for &(event, kind, t, pns, bytes, ack_delay, flag) in EVENTS {
            let now = at(t);
            if pending.as_ref().map_or(false, |p| p.0 != t || !(kind == ACK || kind == LOST)) {
                // No ACK at its instant revealed it: the loss timer's detect_lost_packets
                // (mod.rs:1655-1660), at the loss's own instant.
                let (lost_t, _, lost_bytes, largest) = pending.take().unwrap();
                if let Some(largest) = largest {
                    cc.on_congestion_event(at(lost_t), largest, false, lost_bytes);
                }
            }
            match kind {
                SENT => {
                    sent.insert(pns[0], (now, bytes));
                    in_flight += bytes;
                    cc.on_sent(now, bytes, pns[0]);
                    app_limited = flag; // mod.rs:947
                }
                APP_IDLE => app_limited = true,
                APP_DATA => app_limited = false,
                LOST => {
                    let p = pending.get_or_insert_with(|| (t, Vec::new(), 0, None));
                    for &pn in pns {
                        let (time, size) = sent.remove(&pn).unwrap();
                        if p.1.last().map_or(true, |&(last, _)| pn > last) {
                            p.3 = Some(time);
                        }
                        p.1.push((pn, time));
                        p.2 += size;
                        in_flight -= size;
                    }
                }
                ACK => {
                    let largest = *pns.iter().max().unwrap();
                    let new_largest = largest_acked.map_or(true, |l| largest > l);
                    if new_largest {
                        largest_acked = Some(largest);
                        largest_acked_sent = Some(sent[&largest].0);
                    }
                    let mut remaining = in_flight + pending.as_ref().map_or(0, |p| p.2);
                    for &pn in pns {
                        let (time, size) = sent.remove(&pn).unwrap();
                        remaining -= size;
                        in_flight -= size;
                        let estimate = rtt;
                        cc.on_ack(now, time, size, app_limited, &estimate);
                    }
                    cc.on_end_acks(now, remaining, app_limited, largest_acked);
                    if new_largest {
                        rtt.update(Duration::from_micros(ack_delay), now.saturating_duration_since(largest_acked_sent.unwrap()));
                    }
                    // detect_lost_packets(due_to_ack = true): packet or time threshold (mod.rs:1724-1725).
                    let loss_delay = rtt.conservative().mul_f32(9.0 / 8.0).max(Duration::from_millis(1));
                    let reveals = pending.as_ref().map_or(false, |p| {
                        p.0 == t && p.1.iter().any(|&(pn, time)| {
                            pn < largest_acked.unwrap()
                                && (now.saturating_duration_since(time) >= loss_delay || largest_acked.unwrap() >= pn + 3)
                        })
                    });
                    if reveals {
                        let (_, _, lost_bytes, largest) = pending.take().unwrap();
                        cc.on_congestion_event(now, largest.unwrap(), false, lost_bytes);
                    }
                    if flag && new_largest {
                        cc.on_congestion_event(now, largest_acked_sent.unwrap(), false, 0);
                    }
                }
                _ => unreachable!(),
            }
{checks}        }
"""


def quinn_test(trace, invariant: str, name: str, comment: str = "", finding=None, spec: str = "quinn") -> str:
    """The Rust #[test] for the tests module of quinn-proto's src/congestion/cubic.rs, or
    KeyError (no assertion for this invariant) / NotExpressible."""
    from ..clock import DEFAULT_CLOCK_BASE_US
    if invariant != "idle-inflation":
        raise KeyError(invariant)
    from ..stacks import load_recipes, resolve
    target = resolve(spec, load_recipes())
    if target.recipe is None or target.recipe.name != "quinn" or dict(target.options).get("cc", "cubic") != "cubic" \
            or dict(target.options).get("mtu", "initial") != "initial":
        raise NotExpressible(f"{spec}: the test drives quinn's Cubic built with the trace's datagram size")
    if finding is None:
        finding = find_violation(trace, invariant, spec)
    resolved, rows = rust_event_table(trace, app_events=True)
    mds = trace.header.max_datagram_size
    # A split ACK (two frames at one instant after a loss) is detected by whichever frame
    # quinn's rule picks; the driver has the rule, but keep the table one frame per instant.
    at, bound, why = idle_inflation_check(trace, resolved, finding, mds)
    fn = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    out = [f"    // {line}" for line in (comment or "").splitlines()]
    from ..invariants import CATALOG
    inv = CATALOG[invariant]
    out += [f"    // {why}."]
    out += [f"    // {inv.quote_from}:"] + [f"    //   {line}" for line in wrap_lines(f'"{inv.quote}"')]
    out += ["    #[test]", f"    fn {fn}() {{",
            f"        const SENT: u8 = {SENT_};", f"        const ACK: u8 = {ACK_};",
            f"        const LOST: u8 = {LOST_};", f"        const APP_IDLE: u8 = {APP_IDLE_};",
            f"        const APP_DATA: u8 = {APP_DATA_};",
            "        // (trace event, kind, t (us), packet numbers, bytes sent, ACK delay (us),",
            "        //  SENT: the sender ran out of data (app-limited) / ACK: ECN-CE)",
            "        const EVENTS: &[(usize, u8, u64, &[u64], u64, u64, bool)] = &["]
    for index, kind, t, pns, size, delay, flag in rows:
        out.append(f"            ({index}, {kind}, {t}, &[{', '.join(str(p) for p in pns)}], {size}, {delay}, "
                   f"{'true' if flag else 'false'}),")
    out.append("        ];")
    checks = (f"            if event == {at} {{\n"
              f"                // {finding.detail}\n"
              f"                assert!(\n"
              f"                    cc.window() <= {bound},\n"
              f"                    \"event {at} (t = {trace.events[at].t} us): cwnd {{}} after the first round trip "
              f"after the idle, above {bound} (RFC 9438 §4.2: t excludes the idle period)\",\n"
              f"                    cc.window(),\n"
              f"                );\n"
              f"            }}\n")
    driver = DRIVER
    for key, value in {"mds": mds, "base_us": DEFAULT_CLOCK_BASE_US,
                       "initial_rtt_us": trace.header.initial_rtt_us, "checks": checks}.items():
        driver = driver.replace("{" + key + "}", str(value))
    out.append(driver.strip("\n"))
    out.append("    }")
    return "\n".join(out) + "\n"
