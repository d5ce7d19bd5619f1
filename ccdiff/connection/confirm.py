"""A connection run judged by ccdiff's invariants: the stack's own events, its own window.

A shim that writes the client's qlog (`qlog` option; aioquic's does) gives the run's
own event stream: every packet the stack sent, every ACK and loss it processed, and
the window it logged after each.  That stream is imported (ccdiff/qlog_import.py)
and replayed through the stack's adapter and every invariant, as `ccdiff replay`
does, and the adapter's window is compared with the one the stack logged
(ccdiff/fidelity.py).  A violation found here was reached by the stack's own
connection — its input is what the stack's connection did, not what ccdiff wrote —
and where the fidelity is exact at that event, the stack's own logged window shows
the same step (issue #31 items 2, 4 and 5).

Where the adapter's window is a few bytes off the stack's at the finding (an exact step
cannot match), the same invariants judge the stack's own logged window instead: every
snapshot of the adapter's replay with its cwnd and ssthresh replaced by what the stack
logged after that event (`own_window`).  A finding of the same invariant there is the
stack's own window making the finding's shape, whatever the adapter's fidelity; for
idle-inflation, whose step is a round trip's growth rather than one ACK's, it is the
confirmation that counts.
"""
from __future__ import annotations

from ..fidelity import fidelity
from ..invariants import Checker, Truth
from ..ledger import Ledger
from ..qlog_import import QlogTrace
from ..replay import replay, upstream_status

# Not rules on one window: trajectory-divergence compares the adapter's replay with the
# oracle's (ccdiff/divergence.py), adapter-error is the adapter's own failure.
NOT_ON_OWN_WINDOW = frozenset({"trajectory-divergence", "adapter-error"})


def judge_qlog(qlog: str, spec: str) -> dict:
    """The invariants' findings on the connection's own events, and the adapter's fidelity.

    Each finding also says whether the stack's own logged window makes the same step at
    that event as the adapter's (`logged_step`): only then does the stack's own log
    confirm it.  Where they differ, the adapter (or the import) departs from the stack
    there, and the finding is the adapter's, not yet the stack's."""
    trace = QlogTrace(qlog)
    result = replay(trace, [spec])
    (run,) = [r for r in result.runs.values() if not r.hidden]
    # What the stack logged, event by event: one more pass over the qlog, only when a
    # finding needs its step checked.
    logged = [entry for _, _, entry in trace.stream_logged()] if result.findings else []
    snaps = run.snapshots or []

    def step(index: int) -> dict:
        def at(i, what):
            if not 0 <= i < len(snaps):
                return None
            return snaps[i].cwnd if what == "adapter" else (logged[i] or {}).get("cwnd")
        adapter = (at(index - 1, "adapter"), at(index, "adapter"))
        stack = (at(index - 1, "stack"), at(index, "stack"))
        return {"adapter": list(adapter), "stack": list(stack),
                "confirmed": None not in stack and adapter == stack}
    own, own_at = own_window(trace, run, logged) if result.findings else ({}, {})

    def own_finding(invariant: str, event: int):
        # The stack's own window flagged at the adapter's event, where it is; else its first
        # occurrence (confirmed_by then says the events differ).
        f = own.get(invariant)
        if f is None:
            return None
        t_us, detail = own_at.get(invariant, {}).get(event, (f.t_us, f.detail))
        return {"event": event if event in own_at.get(invariant, {}) else f.event_index,
                "t_us": t_us, "count": f.count, "detail": detail}
    # The status words of replay, conform and fuzz (ccdiff/status.py), on a strict footing:
    # the stack's own connection produced these events, whatever the import's lenient mark
    # says of its loss detection (docs/connection-mode.md), so it is not a reason to doubt them.
    findings = [{"invariant": f.invariant, "status": f.status, "count": f.count, "event": f.event_index,
                 "t_us": f.t_us, "detail": f.detail, "logged_step": step(f.event_index),
                 "own_window_judged": f.invariant not in NOT_ON_OWN_WINDOW,
                 "own_window": own_finding(f.invariant, f.event_index),
                 **_upstream(upstream_status(run, f, "strict"))}
                for f in result.findings if f.stack == run.label]
    agreement = fidelity(qlog, spec, keep_series=False)
    return {"qlog": qlog, "events": trace.n_events, "reachability": trace.reachability,
            "lenient_reason": trace.lenient_reason, "findings": findings,
            "fidelity": {metric: {"agreement": m["agreement"], "compared": m["compared"],
                                  "first_divergence": m["first_divergence"]}
                         for metric, m in agreement["metrics"].items()},
            "fidelity_error": agreement["error"]}


def _upstream(status) -> dict:
    return {"upstream_status": status.text, "upstream_kind": status.kind}


def confirmed_by(finding: dict) -> str | None:
    """How the stack's own log confirms a finding of judge_qlog: its logged window makes the
    adapter's step at that event ("logged step"), or the same invariant flags its own logged
    window at that event ("own window"); None: the adapter's finding on the stack's events,
    not the stack's own window (docs/connection-mode.md, "The stack's own events, judged")."""
    if finding["logged_step"]["confirmed"]:
        return "logged step"
    own = finding.get("own_window")
    if own is not None and own["event"] == finding["event"]:
        return "own window"
    return None


def own_window(trace: QlogTrace, run, logged: list) -> tuple:
    """The invariants' findings on the stack's own logged window: the adapter's snapshots
    with cwnd, ssthresh (and bytes in flight) replaced by the stack's logged values after
    each event (the last logged value where an event has none; the adapter's before the
    first).  Raw findings by invariant, no deviation applied: a finding here is the
    stack's own window, judged by the same rule as the adapter's (Checker, the same trace
    timeline).  Also every occurrence, {invariant: {event: (t_us, detail)}}: an adapter's
    finding is confirmed where the stack's own window is flagged at its event, not only
    where that is the rule's first occurrence on the stack's window (aioquic's 2 s reset
    after a blackout, outage-3s: its own window's first excess-reduction is an explained
    flight-size cut at event 1501, the reset at event 4041 is flagged there too)."""
    snaps = run.snapshots or []
    header = trace.header
    checker = Checker(run.label, header.max_datagram_size, run.target.family, run.profile.min_window_datagrams,
                      bool(run.target.recipe and run.target.recipe.loss_applied_with_ack),
                      **run.profile.checker_options(run.target.options))
    checker.occurrences = {}        # every occurrence, not only the first (Checker.flag keeps those)
    truth = Truth(ecn=run.profile.ecn)
    state: dict = {}
    before = None
    for index, ev in enumerate(map(Ledger(header).resolve, trace.stream())):
        if index >= len(snaps):
            break
        truth.update(ev)
        for key, value in (logged[index] or {}).items() if index < len(logged) else ():
            if key in ("cwnd", "ssthresh", "bytes_in_flight"):
                state[key] = value
        snap = snaps[index]
        if "cwnd" in state:
            snap = snap._replace(cwnd=state["cwnd"], ssthresh=state.get("ssthresh", snap.ssthresh),
                                 bytes_in_flight=state.get("bytes_in_flight", snap.bytes_in_flight))
        checker.check(index, ev, before, snap, truth)
        before = snap
    return {f.invariant: f for f in checker.finish()}, checker.occurrences


def case_own_events(judged: dict) -> dict:
    """A conform case's part of judge_qlog's result (`conform --mode connection`): the
    findings the stack's own log confirms (`confirmed`, each with how), the adapter's
    findings on the stack's events that its log does not (`adapter_only`), and the fidelity.

    Recorded, never a case's verdict: a confirmation shows the stack's own window made the
    step, not that the rule's premise holds for the stack.  The premise is read off the
    import, which lacks state the stack keeps to itself: ngtcp2-reno's own window does not
    grow on the first ACKs of idle-restart (ss-growth-shortfall, confirmed by its own window,
    4 of 4 seeds) because ngtcp2 marks the packets sent while the handshake wrote no
    application data app-limited (ngtcp2_conn.c:12124-12129; ngtcp2_cc.c:126 skips them),
    which its qlog does not log and the import cannot see
    (docs/connection-mode.md, "Own events in conform")."""
    confirmed, adapter_only = [], []
    for f in judged["findings"]:
        how = confirmed_by(f)
        entry = {"invariant": f["invariant"], "status": f["status"], "count": f["count"],
                 "event_index": f["event"], "t_us": f["t_us"]}
        if how is None:
            adapter_only.append(entry)
        else:
            confirmed.append(dict(entry, detail=f["detail"], confirmed_by=how,
                                  upstream_status=f["upstream_status"], upstream_kind=f["upstream_kind"]))
    cwnd = judged["fidelity"].get("cwnd", {})
    own = {"events": judged["events"], "import": judged["reachability"],
           "cwnd_exact": cwnd.get("agreement"), "cwnd_compared": cwnd.get("compared"),
           "confirmed": confirmed, "adapter_only": adapter_only}
    if judged.get("fidelity_error"):
        own["fidelity_error"] = judged["fidelity_error"]
    return own
