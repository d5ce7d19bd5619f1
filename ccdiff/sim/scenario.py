"""Scenarios: one readable TOML file each, under scenarios/ (see scenarios/README.md).

A scenario fixes the path (bottleneck rate, base RTT, drop-tail queue), the
loss model, the receiver's ACK policy, the application pattern and the pass
criteria.  Every time is an integer number of microseconds, every size an
integer number of bytes; probabilities are decimal fractions.
"""
from __future__ import annotations

import json
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
    # connection mode only (docs/connection-mode.md): an endpoint's event loop, woken by a
    # datagram, reads every datagram that arrives within rx_batch_us before it sends
    rx_batch_us: int = 0
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
                if not isinstance(params[key], (list, tuple)):
                    raise SetupError(f"{self.source}: {key} must be a list")
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
        if key in flat and not isinstance(flat[key], list):
            raise SetupError(f"{source}: {key} must be a list")
    for key in ("loss_schedule", "blackouts", "targets"):
        if key in flat:
            flat[key] = tuple(tuple(x) if isinstance(x, list) else x for x in flat[key])
    scenario = Scenario(**flat, source=source)
    _validate(scenario)
    return scenario


# The one schema of a scenario file, shared by `sim`, `conform` and `validate` (issue #32):
# each field's type and range.  The ranges keep a run bounded in time and memory (a
# simulation ends by its deadline; its events grow with the bytes sent) and inside what
# QUIC allows; a value outside is refused with the file and the field, never run.
_S = 1_000_000                       # µs in a second
_INT, _FLOAT, _BOOL, _TEXT = "integer", "number", "boolean", "string"
SCHEMA = {
    # RFC 9000 §14: a QUIC datagram of at least 1200 bytes; 65527 is UDP's largest payload.
    "max_datagram_size": (_INT, 1200, 65_527),
    "initial_rtt_us": (_INT, 1, 60 * _S),
    "rx_batch_us": (_INT, 0, _S),
    "rate_bytes_per_s": (_INT, 1_000, 10**11),
    "base_rtt_us": (_INT, 2, 60 * _S),
    "queue_bytes": (_INT, 1200, 10**9),
    "jitter_us": (_INT, 0, 60 * _S),
    "reorder_rate": (_FLOAT, 0, 1),
    "reorder_delay_us": (_INT, 0, 60 * _S),
    "ack_loss_rate": (_FLOAT, 0, 0.999),
    "ack_every": (_INT, 1, 10_000),
    # RFC 9000 §18.2: max_ack_delay values of 2^14 ms or more are invalid.
    "max_ack_delay_us": (_INT, 0, 16_383_000),
    "ack_on_gap": (_BOOL,),
    "ack_aggregation_us": (_INT, 0, 60 * _S),
    "bytes": (_INT, 1, 10**10),
    "bursts": (_INT, 1, 1_000_000),
    "period_us": (_INT, 0, 3600 * _S),
    # RFC 9002 §6.2.4: "An endpoint MAY send up to two full-sized datagrams containing
    # ack-eliciting packets to avoid an expensive consecutive PTO expiration"; at least one.
    "pto_probes": (_INT, 1, 2),
    "deadline_us": (_INT, 1, 3600 * _S),
    "max_stall_us": (_INT, 0, 3600 * _S),
    "check_invariants": (_BOOL,),
    "name": (_TEXT,),
    "purpose": (_TEXT,),
    "app": (_TEXT,),
    "source": (_TEXT,),
}
MAX_BYTES_IN_ALL = 10**10           # bytes x bursts: what a run may send, at most
MAX_STEPS = 10_000                  # entries of loss_schedule, blackouts, targets


def _type_ok(kind: str, value) -> bool:
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _TEXT:
        return isinstance(value, str)
    if isinstance(value, bool):     # TOML's true is not the integer 1
        return False
    if kind == _INT:
        return isinstance(value, int)
    return isinstance(value, (int, float)) and value == value and abs(value) != float("inf")


def _check_field(s: Scenario, name: str, fail) -> None:
    kind, *bounds = SCHEMA[name]
    value = getattr(s, name)
    if not _type_ok(kind, value):
        fail(f"{name} = {_shown(value)}: expected {'a finite ' if kind == _FLOAT else 'an ' if kind == _INT else 'a '}"
             f"{kind}" + (f" from {bounds[0]:,} to {bounds[1]:,}" if bounds else ""))
    if bounds and not bounds[0] <= value <= bounds[1]:
        fail(f"{name} = {_shown(value)}: expected {bounds[0]:,} to {bounds[1]:,}")


def _shown(value) -> str:
    """A value as the scenario file spells it (true, not True; a string quoted)."""
    return json.dumps(value)[:60] if isinstance(value, (bool, str, int)) else repr(value)[:60]


def _pairs(s: Scenario, name: str, fail, second) -> list:
    value = getattr(s, name)
    if not isinstance(value, tuple) or len(value) > MAX_STEPS:
        fail(f"{name}: expected a list of at most {MAX_STEPS:,} [a, b] pairs")
    for item in value:
        if not (isinstance(item, tuple) and len(item) == 2 and _type_ok(_INT, item[0])
                and _type_ok(second, item[1])):
            fail(f"{name}: {list(item) if isinstance(item, tuple) else item!r} is not a "
                 f"[microseconds, {'rate' if second == _FLOAT else 'microseconds'}] pair")
    return list(value)


def _validate(s: Scenario) -> None:
    def fail(reason):
        raise SetupError(f"{s.source}: {reason}")
    for name in SCHEMA:
        _check_field(s, name, fail)
    if not isinstance(s.targets, tuple) or len(s.targets) > MAX_STEPS or \
            not all(isinstance(t, str) for t in s.targets):
        fail("targets: expected a list of strings")
    if not s.name.strip() or set(s.name) <= {"."} or any(ord(c) < 32 or ord(c) == 127 for c in s.name):
        fail(f"name {s.name!r}: expected a readable name (it names folders and report pages)")
    if s.app not in ("bulk", "bursts"):
        fail(f"app pattern {s.app!r}: expected bulk or bursts")
    if s.app == "bursts" and s.period_us <= 0:
        fail("bursts need period_us > 0")
    if s.bytes * s.bursts > MAX_BYTES_IN_ALL:
        fail(f"bytes x bursts = {s.bytes * s.bursts:,}: a run may send at most {MAX_BYTES_IN_ALL:,} bytes")
    if s.queue_bytes < s.max_datagram_size:
        fail("queue_bytes must hold at least one datagram")
    for until, rate in _pairs(s, "loss_schedule", fail, _FLOAT):
        if until < 0 or not 0 <= rate < 1:
            fail(f"loss step [{until}, {rate}]: expected until >= 0 and a rate in [0, 1)")
    for lo, hi in _pairs(s, "blackouts", fail, _INT):
        if not 0 <= lo < hi:
            fail(f"blackout [{lo}, {hi}] must have 0 <= from < until")


def scenarios_dir() -> Path:
    return project_root() / "scenarios"


def connection_dir() -> Path:
    """Scenarios made for connection mode (docs/connection-mode.md): they set what only a
    real connection has (rx_batch_us) and add nothing to the closed loop's catalog, so
    `conform` runs them only with --mode connection (or by name)."""
    return scenarios_dir() / "connection"


def catalog_path(name: str) -> Path | None:
    """The file of a scenario named in the catalog or among the connection scenarios."""
    for folder in (scenarios_dir(), connection_dir()):
        path = folder / f"{name}.toml"
        try:
            if path.is_file():
                return path
        except OSError:          # a name no file can have (too long): not in the catalog
            continue
    return None


def parse_overrides(items) -> dict:
    """`--set KEY=VALUE` items (sim, confirm): VALUE is JSON when it parses (numbers, lists),
    else a string; Scenario.with_params checks the names and values."""
    params = {}
    for item in items or []:
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if not path.suffix:
        path = catalog_path(name_or_path)
        if path is None:
            known = ", ".join(available_scenarios() + connection_scenarios())
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


def connection_scenarios() -> list:
    return sorted(p.stem for p in connection_dir().glob("*.toml"))
