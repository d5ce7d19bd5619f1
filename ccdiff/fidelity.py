"""`ccdiff fidelity`: does a stack's adapter reproduce what the stack did on a real connection?

    >>> result = fidelity("tests/fixtures/qlog/aioquic-cubic-random-loss.qlog", "oracle")
    >>> result["metrics"]["cwnd"]["agreement"]      # share of compared points that agree
    0.81

The qlog is imported (ccdiff/qlog_import.py) and streamed through the stack's adapter
exactly as `ccdiff replay` does (the shared ledger resolves each event); after each
*settled point* -- the last trace event of one instant, i.e. once the stack has
processed one input (a send, or an ACK with the losses it revealed) -- the adapter's
cwnd, ssthresh and bytes in flight are compared with what the stack itself logged
there (the event's `logged` field).  A metric is compared only where the stack logged
it (aioquic logs no ssthresh before its first loss).  Values agree when equal.

Result: per metric, points compared, points that agree, the agreement rate, and the
first divergence with both values, its time, the trace event and the qlog line; plus a
plot of both runs over time.  A divergence is an adapter bug or a harness assumption
that differs from the real connection (docs/qlog-import.md lists the ones found on the aioquic fixtures).
"""
from __future__ import annotations

from .errors import SetupError
from .ledger import Ledger
from .native import AdapterError
from .cc_shape import recognise
from .qlog_import import QlogTrace
from .stacks import load_recipes, open_controller, resolve
from .trace import Lost

METRICS = ("cwnd", "ssthresh", "bytes_in_flight")


def fidelity(path: str, spec: str, keep_series: bool = True) -> dict:
    """Compare the adapter of `spec` with the stack's own log in the qlog at `path`."""
    # Every packet number space: the stack's controller saw the handshake's packets too
    # (aioquic's window grows with their ACKs), so the adapter must (docs/qlog-import.md).
    trace = QlogTrace(path, all_spaces=True)      # imported and validated whole first
    target = resolve(spec, load_recipes())
    mds = trace.header.max_datagram_size
    controller = open_controller(target, mds, trace.header.initial_rtt_us, trace.header.max_ack_delay)
    ledger = Ledger(trace.header)
    stats = {m: {"compared": 0, "agree": 0, "within_1pct": 0, "within_datagram": 0, "one_sided": 0,
                 "first_divergence": None} for m in METRICS}
    series = {"t": [], "index": [], **{f"{m}_{who}": [] for m in METRICS for who in ("adapter", "logged")}}
    error = None
    held = None                                   # (index, event, where, logged, snapshot, had_loss) of the instant
    index = -1
    points = [0]
    cuts = {"logged": [], "adapter": []}          # (cwnd, flight before; cwnd, flight after): cc_shape
    last = {"logged": None, "adapter": None}

    def settle(item):
        i, ev, where, logged, snap, had_loss = item
        points[0] += 1
        if keep_series:
            series["t"].append(ev.t)
            series["index"].append(i)
        for who, value, flight in (("logged", logged.get("cwnd"), logged.get("bytes_in_flight")),
                                   ("adapter", snap.cwnd, snap.bytes_in_flight)):
            if had_loss and last[who]:
                cuts[who].append((last[who][0], last[who][1], value, flight))
            if value is not None:
                last[who] = (value, flight)
        for metric in METRICS:
            mine = getattr(snap, metric)
            theirs = logged.get(metric)
            if keep_series:
                series[f"{metric}_adapter"].append(mine)
                series[f"{metric}_logged"].append(theirs)
            # A point counts where either side has a value (#34 item 4): the stack logged it,
            # or the adapter has one where the stack logged its state without it (aioquic
            # logs no ssthresh while it has none).  A point with no record of the stack's
            # state (logged empty: see docs/qlog-import.md), or a metric the stack never
            # logs (picoquic's ssthresh), compares nothing.
            if theirs is None and (mine is None or not logged or metric not in trace.logged_metrics):
                continue
            entry = stats[metric]
            entry["compared"] += 1
            if mine is None or theirs is None:
                entry["one_sided"] += 1
            elif mine == theirs:
                entry["agree"] += 1
            if mine is not None and theirs is not None:
                entry["within_1pct"] += abs(mine - theirs) <= 0.01 * abs(theirs)
                entry["within_datagram"] += abs(mine - theirs) <= mds
            if mine != theirs and entry["first_divergence"] is None:
                entry["first_divergence"] = {"event": i, "trace_line": i + 2, "t_us": ev.t,
                                             "qlog_line": where.line, "qlog_event": where.record,
                                             "adapter": mine, "logged": theirs, "kind": type(ev).__name__.lower()}

    had_loss = False
    try:
        for index, (ev, where, logged) in enumerate(trace.stream_logged()):
            resolved = ledger.resolve(ev)
            try:
                snap = controller.step(resolved)
            except (AdapterError, ArithmeticError, ValueError) as exc:
                error = f"event {index} (qlog line {where.line}, event {where.record}): {exc}"
                break
            if held is not None and held[1].t != ev.t:
                settle(held)
                had_loss = False
            had_loss = had_loss or type(ev) is Lost
            held = (index, ev, where, logged, snap, had_loss)
        if held is not None and error is None:
            settle(held)
    finally:
        if hasattr(controller, "close"):
            controller.close()
    metrics = {}
    for metric, entry in stats.items():
        compared = entry["compared"]
        rate = (lambda n: n / compared if compared else None)
        metrics[metric] = dict(entry, agreement=rate(entry["agree"]), within_1pct_rate=rate(entry["within_1pct"]),
                               within_datagram_rate=rate(entry["within_datagram"]))
    firsts = [m["first_divergence"] for m in metrics.values() if m["first_divergence"]]
    first = min(firsts, key=lambda d: d["event"], default=None)
    logged_shape, adapter_shape = recognise(cuts["logged"], mds), recognise(cuts["adapter"], mds)
    result = {"qlog": path, "stack": target.label, "events": trace.n_events, "points": points[0],
              "reachability": trace.reachability, "metrics_order": trace.summary.metrics_order,
              "metrics": metrics, "first_divergence": first,
              "algorithm": {"logged": logged_shape.name, "logged_why": logged_shape.why,
                            "adapter": adapter_shape.name, "adapter_why": adapter_shape.why,
                            "mismatch": bool(logged_shape.name and adapter_shape.name
                                             and logged_shape.name != adapter_shape.name)},
              "error": error, "import": trace.summary.to_dict()}
    if keep_series:
        result["series"] = series
    return result


def diverges(result: dict) -> bool:
    return bool(result["error"]) or any(m["first_divergence"] for m in result["metrics"].values())


def _pct(rate) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def summary_lines(result: dict) -> list:
    lines = []
    algo = result["algorithm"]
    if algo["mismatch"]:
        # said before any number: a rate between two different algorithms means nothing
        lines.append(f"warning: the stack's own log looks like {algo['logged']} ({algo['logged_why']}), "
                     f"the adapter of {result['stack']} like {algo['adapter']} ({algo['adapter_why']}): "
                     f"the numbers below compare two different algorithms; choose a --stack that runs "
                     f"{algo['logged']}")
    elif algo["logged"]:
        lines.append(f"algorithm: the log looks like {algo['logged']} ({algo['logged_why']})")
    lines.append(f"{result['qlog']} through {result['stack']}: {result['events']} events, "
                 f"{result['points']} settled points compared (trace {result['reachability']})")
    for metric in METRICS:
        m = result["metrics"][metric]
        if not m["compared"]:
            lines.append(f"  {metric:<16} not logged by the stack")
            continue
        line = (f"  {metric:<16} {m['agree']}/{m['compared']} agree ({_pct(m['agreement'])}); "
                f"within 1% {_pct(m['within_1pct_rate'])}, within 1 datagram {_pct(m['within_datagram_rate'])}")
        if m["one_sided"]:
            line += f"; {m['one_sided']} point(s) where only one side has a value"
        lines.append(line)
    d = result["first_divergence"]
    if d:
        metric = next(k for k, m in result["metrics"].items() if m["first_divergence"] is d)
        lines.append(f"  first divergence: {metric} at t={d['t_us']} us ({d['kind']}, trace line {d['trace_line']}, "
                     f"qlog line {d['qlog_line']} event {d['qlog_event']}): adapter {d['adapter']}, "
                     f"stack logged {d['logged']}")
    if result["error"]:
        lines.append(f"  adapter error: {result['error']}")
    notes = result["import"].get("notes") or []
    lines.extend(f"  import note: {n}" for n in notes)
    return lines


def plot(result: dict, path) -> None:
    """cwnd and bytes in flight over time: the adapter (solid) and the stack's own log
    (dashed), the first cwnd divergence marked.  Deterministic PNG (no date metadata)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams["text.parse_math"] = False
    s = result["series"]
    t_ms = [t / 1000 for t in s["t"]]
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for ax, metric in zip(axes, ("cwnd", "bytes_in_flight")):
        ax.step(t_ms, s[f"{metric}_adapter"], where="post", color="#b2182b", linewidth=1.4,
                label=f"{result['stack']} adapter")
        logged = [(t, v) for t, v in zip(t_ms, s[f"{metric}_logged"]) if v is not None]
        if logged:
            ax.step([t for t, _ in logged], [v for _, v in logged], where="post", color="#2166ac",
                    linestyle="--", linewidth=1.2, label="stack's own qlog")
        d = result["metrics"][metric]["first_divergence"]
        if d:
            ax.axvline(d["t_us"] / 1000, color="black", linestyle=":", linewidth=1,
                       label=f"first divergence (qlog line {d['qlog_line']})")
        agreement = result["metrics"][metric]["agreement"]
        ax.set_ylabel(f"{metric} (bytes)")
        ax.set_title(f"{metric}: {'' if agreement is None else f'{agreement:.1%} agree'}", fontsize=10, loc="left")
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time since the first event (ms)")
    fig.suptitle(f"fidelity: {result['qlog'].rsplit('/', 1)[-1]} through {result['stack']}", fontsize=11)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", metadata={"Software": None})
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
