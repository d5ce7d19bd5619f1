"""Drives a stack adapter library (implementations/include/ccdiff_adapter.h) via ctypes."""
from __future__ import annotations

import ctypes
import math

from .errors import SetupError
from .snapshot import PHASES, UNKNOWN, Snapshot

ABI_VERSION = 1
CCD_NONE = 2**64 - 1
CCD_NO_TIME = -(2**63)
FLAG_APP_LIMITED, FLAG_ECN_CE = 1, 2


class Packet(ctypes.Structure):
    _fields_ = [("pn", ctypes.c_uint64), ("sent_us", ctypes.c_int64),
                ("bytes", ctypes.c_uint32), ("app_limited", ctypes.c_uint32)]


class RttState(ctypes.Structure):
    _fields_ = [("latest_us", ctypes.c_int64), ("smoothed_us", ctypes.c_int64),
                ("rttvar_us", ctypes.c_int64), ("min_us", ctypes.c_int64)]


class Event(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("now_us", ctypes.c_int64),
                ("bytes_in_flight", ctypes.c_uint64),
                ("packets", ctypes.POINTER(Packet)), ("n_packets", ctypes.c_uint32),
                ("n_spurious", ctypes.c_uint32), ("spurious", ctypes.POINTER(Packet)),
                ("ack_delay_us", ctypes.c_int64), ("rtt", RttState)]


class CSnapshot(ctypes.Structure):
    _fields_ = [("cwnd", ctypes.c_uint64), ("ssthresh", ctypes.c_uint64),
                ("bytes_in_flight", ctypes.c_uint64), ("phase", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("recovery_start_us", ctypes.c_int64),
                ("epoch_start_us", ctypes.c_int64), ("w_max_bytes", ctypes.c_double),
                ("k_us", ctypes.c_double)]


class Config(ctypes.Structure):
    _fields_ = [("max_datagram_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("initial_rtt_us", ctypes.c_int64), ("options", ctypes.c_char_p)]


class AdapterError(Exception):
    """The adapter refused an event (ccd_step < 0): a finding, not a harness bug."""


_LIBRARIES: dict[str, ctypes.CDLL] = {}


def load_library(path: str) -> ctypes.CDLL:
    lib = _LIBRARIES.get(path)
    if lib is not None:
        return lib
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise SetupError(f"cannot load adapter {path}: {exc}") from None
    lib.ccd_abi_version.restype = ctypes.c_uint32
    lib.ccd_describe.restype = ctypes.c_char_p
    lib.ccd_open.restype = ctypes.c_void_p
    lib.ccd_open.argtypes = [ctypes.POINTER(Config), ctypes.c_char_p, ctypes.c_size_t]
    lib.ccd_step.restype = ctypes.c_int
    lib.ccd_step.argtypes = [ctypes.c_void_p, ctypes.POINTER(Event), ctypes.POINTER(CSnapshot)]
    lib.ccd_last_error.restype = ctypes.c_char_p
    lib.ccd_last_error.argtypes = [ctypes.c_void_p]
    lib.ccd_close.argtypes = [ctypes.c_void_p]
    version = lib.ccd_abi_version()
    if version != ABI_VERSION:
        raise SetupError(f"adapter {path} speaks ABI {version}, this ccdiff speaks {ABI_VERSION}; rebuild it")
    _LIBRARIES[path] = lib
    return lib


def _packets(packets) -> ctypes.Array:
    array = (Packet * len(packets))()
    for slot, (pn, sent, size, app_limited) in zip(array, packets):
        slot.pn, slot.sent_us, slot.bytes, slot.app_limited = pn, sent, size, int(app_limited)
    return array


def _optional_time(value: int):
    return None if value == CCD_NO_TIME else value


def _optional_float(value: float):
    return None if math.isnan(value) else value


class NativeController:
    """One controller instance inside an adapter library."""

    def __init__(self, library_path: str, max_datagram_size: int, initial_rtt_us: int, options: str = ""):
        self.lib = load_library(library_path)
        self.description = self.lib.ccd_describe().decode()
        config = Config(max_datagram_size, 0, initial_rtt_us, options.encode())
        err = ctypes.create_string_buffer(512)
        handle = self.lib.ccd_open(ctypes.byref(config), err, len(err))
        if not handle:
            raise SetupError(err.value.decode(errors="replace") or f"{library_path}: ccd_open failed")
        self.handle = ctypes.c_void_p(handle)
        self._event = Event()
        self._out = CSnapshot()

    def step(self, ev) -> Snapshot:
        c = self._event
        c.kind = ev.kind
        c.flags = (FLAG_APP_LIMITED if ev.app_limited else 0) | (FLAG_ECN_CE if ev.ecn_ce else 0)
        c.now_us = ev.t
        c.bytes_in_flight = ev.bytes_in_flight
        packets = _packets(ev.packets)
        spurious = _packets(ev.spurious)
        c.packets = packets
        c.n_packets = len(ev.packets)
        c.spurious = spurious
        c.n_spurious = len(ev.spurious)
        c.ack_delay_us = ev.ack_delay
        c.rtt.latest_us, c.rtt.smoothed_us, c.rtt.rttvar_us, c.rtt.min_us = ev.rtt
        out = self._out
        if self.lib.ccd_step(self.handle, ctypes.byref(c), ctypes.byref(out)) < 0:
            message = self.lib.ccd_last_error(self.handle)
            raise AdapterError((message or b"ccd_step failed").decode(errors="replace"))
        phase = PHASES[out.phase] if out.phase < len(PHASES) else UNKNOWN
        return Snapshot(out.cwnd, None if out.ssthresh == CCD_NONE else out.ssthresh,
                        out.bytes_in_flight, phase, _optional_time(out.recovery_start_us),
                        _optional_time(out.epoch_start_us), _optional_float(out.w_max_bytes),
                        _optional_float(out.k_us))

    def close(self) -> None:
        if self.handle:
            self.lib.ccd_close(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
