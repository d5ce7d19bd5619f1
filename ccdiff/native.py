"""Drives a stack adapter library (implementations/include/ccdiff_adapter.h) via ctypes."""
from __future__ import annotations

import ctypes
import math
import struct

from .clock import DEFAULT_CLOCK_BASE_US, check_clock_base
from .errors import SetupError
from .reach import DEFAULT_MAX_ACK_DELAY_US
from .snapshot import PHASES, UNKNOWN, Snapshot

ABI_VERSION = 4
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
    _fields_ = [("max_datagram_size", ctypes.c_uint32), ("max_ack_delay_us", ctypes.c_uint32),
                ("initial_rtt_us", ctypes.c_int64), ("options", ctypes.c_char_p),
                ("clock_base_us", ctypes.c_int64)]


_PACKET = struct.Struct("=QqII")
_PACKET_SIZE = _PACKET.size
_EVENT_HEAD = struct.Struct("=IIqQ")      # kind, flags, now_us, bytes_in_flight
_U32 = struct.Struct("=I")
_EVENT_TAIL = struct.Struct("=qqqqq")     # ack_delay_us, rtt.{latest, smoothed, rttvar, min}
_SNAPSHOT = struct.Struct("=QQQIIqqdd")
_OFF_N_PACKETS = Event.n_packets.offset
_OFF_N_SPURIOUS = Event.n_spurious.offset
_OFF_ACK_DELAY = Event.ack_delay_us.offset
assert _PACKET_SIZE == ctypes.sizeof(Packet) and _SNAPSHOT.size == ctypes.sizeof(CSnapshot)
assert (Event.kind.offset, Event.flags.offset, Event.now_us.offset, Event.bytes_in_flight.offset) == (0, 4, 8, 16)
assert Event.rtt.offset == _OFF_ACK_DELAY + 8 and ctypes.sizeof(RttState) == 32
_new_snapshot = tuple.__new__


class AdapterError(Exception):
    """The adapter refused an event (ccd_step < 0): a finding, not a harness bug."""


class AdapterCrash(AdapterError):
    """An isolated adapter's process died or stopped answering (a segfault, an abort, a
    hang): a finding for that stack, at open as at any step, never the run's error."""


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

    def __init__(self, library_path: str, max_datagram_size: int, initial_rtt_us: int, options: str = "",
                 clock_base_us: int = DEFAULT_CLOCK_BASE_US, max_ack_delay_us: int = DEFAULT_MAX_ACK_DELAY_US):
        self.lib = load_library(library_path)
        self.description = self.lib.ccd_describe().decode()
        # Trace time 0 is clock_base_us on the stack's monotonic clock (ccdiff/clock.py).
        config = Config(max_datagram_size, max_ack_delay_us, initial_rtt_us, options.encode(),
                        check_clock_base(clock_base_us, library_path))
        err = ctypes.create_string_buffer(512)
        handle = self.lib.ccd_open(ctypes.byref(config), err, len(err))
        if not handle:
            raise SetupError(err.value.decode(errors="replace") or f"{library_path}: ccd_open failed")
        self.handle = ctypes.c_void_p(handle)
        self._event = Event()
        self._out = CSnapshot()
        self._event_ref = ctypes.byref(self._event)
        self._out_ref = ctypes.byref(self._out)
        self._step = self.lib.ccd_step
        self._cap_packets = self._cap_spurious = 0
        self._grow("packets", 64)
        self._grow("spurious", 8)

    def step(self, ev) -> Snapshot:
        # Hot path (one call per event): the event's scalar fields are packed with
        # struct into the reused C structs and the packet arrays are reused buffers,
        # so no ctypes objects are created per event.
        packets, spurious = ev.packets, ev.spurious
        n, m = len(packets), len(spurious)
        if n > self._cap_packets:
            self._grow("packets", n)
        if m > self._cap_spurious:
            self._grow("spurious", m)
        pack_packet = _PACKET.pack_into
        buf = self._packets_buf
        offset = 0
        for pn, sent, size, app_limited in packets:
            pack_packet(buf, offset, pn, sent, size, app_limited)
            offset += _PACKET_SIZE
        if m:
            buf = self._spurious_buf
            offset = 0
            for pn, sent, size, app_limited in spurious:
                pack_packet(buf, offset, pn, sent, size, app_limited)
                offset += _PACKET_SIZE
        event = self._event
        _EVENT_HEAD.pack_into(event, 0, ev.kind,
                              (FLAG_APP_LIMITED if ev.app_limited else 0) | (FLAG_ECN_CE if ev.ecn_ce else 0),
                              ev.t, ev.bytes_in_flight)
        _U32.pack_into(event, _OFF_N_PACKETS, n)
        _U32.pack_into(event, _OFF_N_SPURIOUS, m)
        latest, smoothed, rttvar, min_rtt = ev.rtt
        _EVENT_TAIL.pack_into(event, _OFF_ACK_DELAY, ev.ack_delay, latest, smoothed, rttvar, min_rtt)
        if self._step(self.handle, self._event_ref, self._out_ref) < 0:
            message = self.lib.ccd_last_error(self.handle)
            raise AdapterError((message or b"ccd_step failed").decode(errors="replace"))
        cwnd, ssthresh, bif, phase, _, recovery, epoch, w_max, k_us = _SNAPSHOT.unpack_from(self._out)
        return _new_snapshot(Snapshot, (
            cwnd, None if ssthresh == CCD_NONE else ssthresh, bif,
            PHASES[phase] if phase < len(PHASES) else UNKNOWN,
            None if recovery == CCD_NO_TIME else recovery, None if epoch == CCD_NO_TIME else epoch,
            None if w_max != w_max else w_max, None if k_us != k_us else k_us))

    def _grow(self, which: str, need: int) -> None:
        cap = max(need, 2 * getattr(self, f"_cap_{which}"))
        array = (Packet * cap)()
        setattr(self, f"_{which}_buf", array)
        setattr(self, f"_cap_{which}", cap)
        setattr(self._event, which, ctypes.cast(array, ctypes.POINTER(Packet)))

    def close(self) -> None:
        if self.handle:
            self.lib.ccd_close(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
