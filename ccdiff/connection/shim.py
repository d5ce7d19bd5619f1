"""Loading a stack's connection shim and calling it: one Python interface for both forms.

A native shim is libccdiff_connection.so (implementations/include/ccdiff_connection.h),
called through ctypes; a Python stack's shim is ccdiff_connection.py with the same
calls (docs/connection-mode.md).  Both become an `Endpoint` with:

    recv(data, now)          send(now) -> (datagram, send_at) | None
    timeout(now) -> µs|None  on_timeout(now)
    write(n, fin, now) -> accepted      read(now) -> bytes read in all
    stats() -> dict (the ccd_conn_stats fields; None where the stack does not say)
    close()

A stack's failure (a -1, a Rust panic caught at the boundary, a Python exception
raised by the stack's code) becomes ShimError with the stack's own message: the run
records it as the stack's error, never a traceback of ccdiff.
"""
from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path

from ..errors import SetupError

ABI_VERSION = 1
LIBRARY_NAME = "libccdiff_connection.so"
MODULE_NAME = "ccdiff_connection.py"
UNKNOWN = 2**64 - 1
NO_TIMER = 2**64 - 1
STATS_FIELDS = ("cwnd", "bytes_in_flight", "ssthresh", "smoothed_rtt_us", "min_rtt_us", "latest_rtt_us",
                "packets_sent", "packets_lost", "bytes_sent", "congestion_events", "in_recovery",
                "stream_bytes_read", "stream_fin_read", "established", "closed")
MAX_DATAGRAM = 65_536


class ShimError(Exception):
    """The stack failed inside a call (its own message)."""


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS]


_LIBRARIES: dict = {}
_MODULES: dict = {}


def open_shim(path: Path):
    """A factory `new(is_server, now_us, seed, options) -> Endpoint` for the shim at path."""
    if path.name == MODULE_NAME:
        module = _module(path)
        return lambda *args: _PythonEndpoint(module, *args)
    lib = _library(path)
    return lambda *args: _NativeEndpoint(lib, *args)


def _module(path: Path):
    key = str(path)
    if key not in _MODULES:
        name = "_ccdiff_connection_" + "".join(c if c.isalnum() else "_" for c in str(path.parent))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise SetupError(f"cannot load connection shim {path}: {type(exc).__name__}: {exc}") from None
        if getattr(module, "ABI_VERSION", None) != ABI_VERSION:
            raise SetupError(f"connection shim {path} speaks ABI {getattr(module, 'ABI_VERSION', None)}, "
                             f"this ccdiff speaks {ABI_VERSION}; rebuild it")
        _MODULES[key] = module
    return _MODULES[key]


def _library(path: Path):
    key = str(path)
    if key in _LIBRARIES:
        return _LIBRARIES[key]
    try:
        lib = ctypes.CDLL(key)
    except OSError as exc:
        raise SetupError(f"cannot load connection shim {path}: {exc}") from None
    u64, i64, vp = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p
    signatures = {
        "ccd_conn_abi_version": (ctypes.c_uint32, []),
        "ccd_conn_new": (vp, [ctypes.c_int, u64, u64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
        "ccd_conn_free": (None, [vp]),
        "ccd_conn_recv": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_size_t, u64]),
        "ccd_conn_send": (i64, [vp, ctypes.c_void_p, ctypes.c_size_t, u64, ctypes.POINTER(u64)]),
        "ccd_conn_timeout": (u64, [vp, u64]),
        "ccd_conn_on_timeout": (ctypes.c_int, [vp, u64]),
        "ccd_conn_write": (i64, [vp, u64, ctypes.c_int, u64]),
        "ccd_conn_read": (i64, [vp, u64]),
        "ccd_conn_stats": (ctypes.c_int, [vp, ctypes.POINTER(_Stats)]),
        "ccd_conn_last_error": (ctypes.c_char_p, [vp]),
    }
    for name, (restype, argtypes) in signatures.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise SetupError(f"connection shim {path} does not export {name} "
                             "(implementations/include/ccdiff_connection.h)") from None
        fn.restype, fn.argtypes = restype, argtypes
    version = lib.ccd_conn_abi_version()
    if version != ABI_VERSION:
        raise SetupError(f"connection shim {path} speaks ABI {version}, this ccdiff speaks {ABI_VERSION}; rebuild it")
    _LIBRARIES[key] = lib
    return lib


class _NativeEndpoint:
    def __init__(self, lib, is_server: bool, now: int, seed: int, options: str):
        self.lib = lib
        err = ctypes.create_string_buffer(512)
        self.h = lib.ccd_conn_new(int(is_server), now, seed & (2**64 - 1), options.encode(), err, len(err))
        if not self.h:
            raise ShimError(err.value.decode(errors="replace") or "ccd_conn_new failed")
        self.buf = ctypes.create_string_buffer(MAX_DATAGRAM)
        self.at = ctypes.c_uint64(0)
        self.st = _Stats()

    def _fail(self, what: str):
        message = self.lib.ccd_conn_last_error(self.h) or b""
        raise ShimError(f"{what}: {message.decode(errors='replace') or 'failed'}")

    def recv(self, data: bytes, now: int) -> None:
        if self.lib.ccd_conn_recv(self.h, data, len(data), now) < 0:
            self._fail("ccd_conn_recv")

    def send(self, now: int):
        n = self.lib.ccd_conn_send(self.h, self.buf, MAX_DATAGRAM, now, ctypes.byref(self.at))
        if n < 0:
            self._fail("ccd_conn_send")
        if n == 0:
            return None
        return self.buf.raw[:n], self.at.value

    def timeout(self, now: int):
        at = self.lib.ccd_conn_timeout(self.h, now)
        return None if at == NO_TIMER else at

    def on_timeout(self, now: int) -> None:
        if self.lib.ccd_conn_on_timeout(self.h, now) < 0:
            self._fail("ccd_conn_on_timeout")

    def write(self, length: int, fin: bool, now: int) -> int:
        n = self.lib.ccd_conn_write(self.h, length, int(fin), now)
        if n < 0:
            self._fail("ccd_conn_write")
        return n

    def read(self, now: int) -> int:
        n = self.lib.ccd_conn_read(self.h, now)
        if n < 0:
            self._fail("ccd_conn_read")
        return n

    def stats(self) -> dict:
        if self.lib.ccd_conn_stats(self.h, ctypes.byref(self.st)) < 0:
            self._fail("ccd_conn_stats")
        return {name: (None if (v := getattr(self.st, name)) == UNKNOWN else v) for name in STATS_FIELDS}

    def close(self) -> None:
        if self.h:
            self.lib.ccd_conn_free(self.h)
            self.h = None


class _PythonEndpoint:
    """A Python shim's endpoint; an exception from the stack's code is a ShimError."""

    def __init__(self, module, is_server: bool, now: int, seed: int, options: str):
        try:
            self.ep = module.new(is_server, now, seed, options)
        except Exception as exc:
            raise ShimError(f"new: {type(exc).__name__}: {exc}") from None

    def _call(self, name: str, *args):
        try:
            return getattr(self.ep, name)(*args)
        except Exception as exc:
            raise ShimError(f"{name}: {type(exc).__name__}: {exc}") from None

    def recv(self, data, now):
        self._call("recv", data, now)

    def send(self, now):
        return self._call("send", now)

    def timeout(self, now):
        return self._call("timeout", now)

    def on_timeout(self, now):
        self._call("on_timeout", now)

    def write(self, length, fin, now):
        return self._call("write", length, fin, now)

    def read(self, now):
        return self._call("read", now)

    def stats(self):
        values = self._call("stats")
        return {name: values.get(name) for name in STATS_FIELDS}

    def close(self):
        self._call("close")
