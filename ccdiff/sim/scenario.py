"""Scenarios: one readable TOML file each, under scenarios/ (see scenarios/README.md).

A scenario fixes the path (bottleneck rate, base RTT, drop-tail queue), the
loss model, the receiver's ACK policy, the application pattern and the pass
criteria.  Every time is an integer number of microseconds, every size an
integer number of bytes; probabilities are decimal fractions.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path

from ..errors import SetupError
from ..paths import project_root

METRICS = ("completion_us", "goodput_bytes_per_s", "min_window_us", "recovery_transitions",
           "delivered_bytes", "packets_sent", "packets_lost", "ptos", "persistent_congestions",
           "max_cwnd", "final_cwnd", "events")


@dataclass(frozen=True)
class Scenario:
    name: str
    purpose: str = ""
    targets: tuple = ()               # RFC rules / real bugs this scenario is aimed at
    # connection
    max_datagram_size: int = 1200
    initial_rtt_us: int = 333_000     # RFC 9002 §6.2.2 kInitialRtt
    # path
    rate_bytes_per_s: int = 12_500_000
    base_rtt_us: int = 10_000
    queue_bytes: int = 250_000
    jitter_us: int = 0                # extra 0..jitter_us on every ACK's return (kept in order)
    reorder_rate: float = 0.0         # share of data packets held back by reorder_delay_us
    reorder_delay_us: int = 0
    # losses: [[until_us, rate], ...] piecewise constant, the last rate holds after
    loss_schedule: tuple = ()
    blackouts: tuple = ()             # [[from_us, until_us], ...]: every data packet and ACK lost
    ack_loss_rate: float = 0.0
    # receiver
    ack_every: int = 2                # ACK every N ack-eliciting packets (RFC 9000 §13.2.2)
    max_ack_delay_us: int = 25_000    # ... or after max_ack_delay
    ack_on_gap: bool = True           # immediately on a gap (RFC 9000 §13.2.1)
    ack_aggregation_us: int = 0       # ACKs reach the sender in batches at multiples of this
    # application
    app: str = "bulk"                 # bulk | bursts
    bytes: int = 1_000_000            # bulk: bytes to transfer; bursts: bytes per burst
    bursts: int = 1
    period_us: int = 0                # bursts: a new burst every period_us
    # sender
    pto_probes: int = 2               # RFC 9002 §6.2.4: up to two probes per PTO
    # pass criteria
    deadline_us: int = 10_000_000
    max_stall_us: int = 0             # liveness: longest time without new delivery (0: unchecked)
    check_invariants: bool = True
    source: str = ""

    def with_params(self, **params) -> "Scenario":
        """A copy with some fields changed (flat field names), validated."""
        unknown = sorted(set(params) - _KNOWN)
        if unknown:
            raise SetupError(f"{self.source}: unknown scenario field {unknown[0]!r}; known: "
                             f"{', '.join(sorted(_KNOWN))}")
        for key in ("loss_schedule", "blackouts", "targets"):
            if key in params:
                params[key] = tuple(tuple(x) if isinstance(x, list) else x for x in params[key])
        scenario = replace(self, **params)
        _validate(scenario)
        return scenario


_KNOWN = {f.name for f in fields(Scenario)}
_SECTIONS = {"connection", "path", "loss", "ack", "app", "sender", "pass"}


def parse_scenario(data: dict, source: str = "<scenario>") -> Scenario:
    flat = {}
    for key, value in data.items():
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise SetupError(f"{source}: [{key}] must be a table")
            for sub, val in value.items():
                name = {"rate": "loss_rate"}.get(sub, sub) if key == "loss" else sub
                if key == "app" and sub == "pattern":
                    name = "app"
                flat[name] = val
        elif key == "metrics":
            continue   # documentation only: every run reports every metric
        else:
            flat[key] = value
    if "loss_rate" in flat:   # a constant rate is a one-step schedule
        flat.setdefault("loss_schedule", [[2**53, flat.pop("loss_rate")]])
    unknown = sorted(set(flat) - _KNOWN)
    if unknown:
        raise SetupError(f"{source}: unknown scenario field {unknown[0]!r}; known: {', '.join(sorted(_KNOWN))}")
    if "name" not in flat:
        raise SetupError(f"{source}: a scenario needs a name")
    for key in ("loss_schedule", "blackouts", "targets"):
        if key in flat:
            flat[key] = tuple(tuple(x) if isinstance(x, list) else x for x in flat[key])
    scenario = Scenario(**flat, source=source)
    _validate(scenario)
    return scenario


def _validate(s: Scenario) -> None:
    def fail(reason):
        raise SetupError(f"{s.source}: {reason}")
    for name in ("max_datagram_size", "rate_bytes_per_s", "base_rtt_us", "ack_every", "bytes",
                 "bursts", "deadline_us", "initial_rtt_us"):
        if not isinstance(getattr(s, name), int) or getattr(s, name) <= 0:
            fail(f"{name} must be a positive integer")
    if s.base_rtt_us < 2:
        fail("base_rtt_us must be at least 2")
    if s.app not in ("bulk", "bursts"):
        fail(f"app pattern {s.app!r}: expected bulk or bursts")
    if s.app == "bursts" and s.period_us <= 0:
        fail("bursts need period_us > 0")
    if s.queue_bytes < s.max_datagram_size:
        fail("queue_bytes must hold at least one datagram")
    for until, rate in s.loss_schedule:
        if not 0 <= rate < 1:
            fail(f"loss rate {rate} must be in [0, 1)")
    for lo, hi in s.blackouts:
        if not 0 <= lo < hi:
            fail(f"blackout [{lo}, {hi}] must have 0 <= from < until")


def scenarios_dir() -> Path:
    return project_root() / "scenarios"


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if not path.suffix:
        path = scenarios_dir() / f"{name_or_path}.toml"
        if not path.exists():
            known = ", ".join(available_scenarios())
            raise SetupError(f"unknown scenario {name_or_path!r}; known: {known}")
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:      # a .toml path the user named
        raise SetupError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SetupError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"{path}: {exc}") from None
    return parse_scenario(data, str(path))


def available_scenarios() -> list:
    return sorted(p.stem for p in scenarios_dir().glob("*.toml"))
