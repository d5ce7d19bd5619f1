"""Drives an in-process Python adapter (a stack whose controller is Python: aioquic).

A `language = "python"` stack builds `ccdiff_adapter.py` into its build folder
(where a C or Rust stack builds `libccdiff_adapter.so`), next to the pinned
upstream modules it imports.  The module speaks the same contract as the C ABI
(implementations/include/ccdiff_adapter.h), in Python (docs/adapters.md,
"Python adapters"):

    ABI_VERSION = 4
    describe() -> str                                  # ccd_describe
    open(max_datagram_size, max_ack_delay_us,          # ccd_open; ValueError = refused
         initial_rtt_us, options, clock_base_us, folder) -> controller
    controller.step(event) -> 8-tuple                  # ccd_step; ValueError = refused event
    controller.close()                                 # ccd_close

`event` is the resolved event NativeController packs into a `ccd_event`
(kind, t, bytes_in_flight, packets, spurious, ack_delay, app_limited, ecn_ce,
rtt), plus stack_rtt (an ACK's own RTT sample from the trace, µs, or None: the
C struct has no such field); the tuple is a `ccd_snapshot` (cwnd, ssthresh or None, bytes_in_flight,
phase index of snapshot.PHASES, recovery_start_us or None, epoch_start_us or
None, w_max bytes or None, k_us or None).  This wrapper checks every value of
it before it becomes a Snapshot, as the C struct's types would.

Crashes and hangs: an exception raised by the stack's code is the Python form of
a Rust panic or a C abort, and becomes the stack's `adapter-error` finding
(AdapterError), never a traceback of ccdiff.  A hang (an endless loop in the
controller) is cut by the same isolation the native stacks get: `--isolate`
(ccdiff/isolation.py) routes every recipe, this one included, to a forked
`ccdiff serve` child, whose Session opens the controller through
`open_adapter` (ccdiff/serve.py) and is abandoned after the step timeout.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

from .errors import SetupError
from .native import ABI_VERSION, AdapterError
from .reach import DEFAULT_MAX_ACK_DELAY_US
from .snapshot import PHASES, UNKNOWN, Snapshot

ADAPTER_NAME = "ccdiff_adapter.py"
_MODULES: dict[str, object] = {}


def load_module(path: str):
    """The adapter module at `path`, imported once per process under a name of its own
    (two versions of one stack never share sys.modules entries)."""
    module = _MODULES.get(path)
    if module is not None:
        return module
    folder = Path(path).parent
    name = "_ccdiff_pyadapter_" + "".join(c if c.isalnum() else "_" for c in str(folder))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SetupError(f"cannot load adapter {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:       # a broken build: say which, exit 2
        sys.modules.pop(name, None)
        raise SetupError(f"cannot load adapter {path}: {type(exc).__name__}: {exc}") from None
    version = getattr(module, "ABI_VERSION", None)
    if version != ABI_VERSION:
        raise SetupError(f"adapter {path} speaks ABI {version}, this ccdiff speaks {ABI_VERSION}; rebuild it")
    _MODULES[path] = module
    return module


def _time(value, what: str):
    if value is None:
        return None
    if type(value) is not int:
        raise AdapterError(f"adapter snapshot: {what} is {value!r}, not an integer number of us or None")
    return value


def _float(value, what: str):
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise AdapterError(f"adapter snapshot: {what} is {value!r}, not a number or None")
    value = float(value)
    return None if math.isnan(value) else value


def _count(value, what: str) -> int:
    if type(value) is not int or not 0 <= value < 2**64:
        raise AdapterError(f"adapter snapshot: {what} is {value!r}, not a byte count (u64)")
    return value


def to_snapshot(values) -> Snapshot:
    """A ccd_snapshot tuple checked field by field (what the C struct's types enforce)."""
    if not isinstance(values, tuple) or len(values) != 8:
        raise AdapterError(f"adapter snapshot: expected an 8-tuple, got {type(values).__name__}")
    cwnd, ssthresh, bif, phase, recovery, epoch, w_max, k_us = values
    if type(phase) is not int:
        raise AdapterError(f"adapter snapshot: phase is {phase!r}, not an index of {PHASES}")
    return Snapshot(_count(cwnd, "cwnd"), None if ssthresh is None else _count(ssthresh, "ssthresh"),
                    _count(bif, "bytes_in_flight"), PHASES[phase] if 0 <= phase < len(PHASES) else UNKNOWN,
                    _time(recovery, "recovery_start_us"), _time(epoch, "epoch_start_us"),
                    _float(w_max, "w_max"), _float(k_us, "k_us"))


class PythonController:
    """One controller of a Python adapter; the interface of NativeController."""

    def __init__(self, adapter_path: str, max_datagram_size: int, initial_rtt_us: int, options: str = "",
                 clock_base_us: int | None = None, max_ack_delay_us: int = DEFAULT_MAX_ACK_DELAY_US):
        from .clock import DEFAULT_CLOCK_BASE_US, check_clock_base
        module = load_module(adapter_path)
        self.description = str(module.describe())
        base = check_clock_base(DEFAULT_CLOCK_BASE_US if clock_base_us is None else clock_base_us, adapter_path)
        try:
            self.controller = module.open(max_datagram_size=max_datagram_size, max_ack_delay_us=max_ack_delay_us,
                                          initial_rtt_us=initial_rtt_us,
                                          options=options, clock_base_us=base,
                                          folder=str(Path(adapter_path).parent))
        except ValueError as exc:     # ccd_open's NULL + message: bad options, a bad base
            raise SetupError(str(exc)) from None
        except Exception as exc:      # the stack's constructor raised
            raise SetupError(f"{adapter_path}: opening the controller raised {type(exc).__name__}: {exc}") from None

    def step(self, ev) -> Snapshot:
        if self.controller is None:
            raise AdapterError("step after close")
        try:
            values = self.controller.step(ev)
        except RecursionError as exc:
            raise AdapterError(f"the stack recursed without end: {exc}") from None
        except ValueError as exc:      # the adapter refused the event (ccd_step < 0)
            raise AdapterError(str(exc) or "step refused") from None
        except Exception as exc:       # the stack's own code raised: its panic, a finding
            raise AdapterError(f"{type(exc).__name__} in the stack: {exc}") from None
        return to_snapshot(values)

    def close(self) -> None:
        if self.controller is not None:
            close = getattr(self.controller, "close", None)
            self.controller = None
            if close is not None:
                close()
