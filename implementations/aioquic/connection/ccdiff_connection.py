"""ccdiff connection shim for aioquic: its own QuicConnection, client and server.

The Python form of implementations/include/ccdiff_connection.h (ABI 1,
docs/connection-mode.md): `new(is_server, now_us, seed, options)` gives an
endpoint with recv / send / timeout / on_timeout / write / read / stats /
close.  Everything between the datagrams is aioquic's: TLS 1.3, packet
protection, loss detection and PTO (quic/recovery.py), its pacer
(QuicPacketPacer) and its congestion controller (quic/congestion/).

aioquic takes the time as an argument everywhere (`now`, float seconds), so no
clock facade is needed: stack time = CCD_CONN_CLOCK_BASE_US + virtual µs.  Its
timer becomes the first microsecond at which aioquic itself sees it due, so
the harness never calls handle_timer too early (such a call does nothing).

The package is this build's own aioquic (site/, compiled from the pinned sdist
by build.sh), imported under a private name so it never meets another aioquic
in the process (the tests install aioquic 1.7.2 from PyPI for their fixtures).
aioquic draws its connection IDs and TLS secrets from os.urandom: their values
change from run to run, their sizes do not, so the datagrams' sizes and times,
all a run records, are the same.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from pathlib import Path

ABI_VERSION = 1
CLOCK_BASE_US = 259_201_234_567          # CCD_CONN_CLOCK_BASE_US
ADDR = ("192.0.2.1", 4433)               # one path: aioquic wants an address, never reads it
OPTIONS = ("mds", "cert", "key", "cc", "qlog")
_PACKAGE = {}


class _Clock:
    """aioquic's qlog writer stamps events with time.time() (quic/logger.py log_event): in
    this build's private package its `time` is this clock, which reads the virtual time
    of the call in progress (each endpoint call sets it), so the qlog is in virtual time."""
    now = 0.0

    def time(self) -> float:
        return self.now


_CLOCK = _Clock()


def _aioquic():
    """This build's aioquic, imported once under a private package name."""
    if "pkg" not in _PACKAGE:
        root = Path(__file__).resolve().parent / "site" / "aioquic"
        name = "_ccdiff_conn_aioquic_" + "".join(c if c.isalnum() else "_" for c in str(root.parent.parent))
        spec = importlib.util.spec_from_file_location(name, root / "__init__.py",
                                                      submodule_search_locations=[str(root)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _PACKAGE["pkg"] = {part: importlib.import_module(f"{name}.quic.{part}")
                           for part in ("configuration", "connection", "events", "packet", "logger")}
        _PACKAGE["pkg"]["logger"].time = _CLOCK
        _PACKAGE["pkg"]["version"] = module.__version__
        _PACKAGE["pkg"]["buffer"] = importlib.import_module(f"{name}.buffer")
    return _PACKAGE["pkg"]


def _as_seconds(now_us: int) -> float:
    return (CLOCK_BASE_US + now_us) / 1e6


def _seconds(now_us: int) -> float:
    """The `now` of a call, which the qlog clock reads too."""
    _CLOCK.now = seconds = _as_seconds(now_us)
    return seconds


def _micros(at: float) -> int:
    """aioquic's absolute time in float seconds -> the first virtual µs at which aioquic
    sees it due (`now >= at` in float seconds: a µs that rounds below it would make
    handle_timer do nothing, and the harness would call it again and again)."""
    us = max(0, math.floor((at - CLOCK_BASE_US / 1e6) * 1e6))
    while _as_seconds(us) < at:
        us += 1
    return us


def _parse(options: str) -> dict:
    values = {"cc": "cubic", "mds": "1200"}
    for item in filter(None, options.split(";")):
        key, sep, value = item.partition("=")
        if not sep or key not in OPTIONS:
            raise ValueError(f"aioquic connection: unknown option {item!r}; known: {', '.join(OPTIONS)}")
        values[key] = value
    if values["cc"] not in ("cubic", "reno"):
        raise ValueError(f"aioquic connection: cc={values['cc']}: expected cubic or reno")
    return values


def new(is_server: bool, now_us: int, seed: int, options: str):
    return Endpoint(bool(is_server), now_us, seed, _parse(options))


class Endpoint:
    def __init__(self, is_server: bool, now_us: int, seed: int, opts: dict):
        self.a = _aioquic()
        self.is_server = is_server
        config = self.a["configuration"].QuicConfiguration(
            is_client=not is_server, alpn_protocols=["ccdiff"],
            max_datagram_size=int(opts["mds"]), congestion_control_algorithm=opts["cc"],
            # Never the limit (docs/connection-mode.md): flow control and the idle timeout.
            max_data=1 << 30, max_stream_data=1 << 30, idle_timeout=600.0)
        self.qlog = opts.get("qlog")
        if self.qlog:
            config.quic_logger = self.a["logger"].QuicLogger()
        if is_server:
            config.load_cert_chain(opts["cert"], opts["key"])
        else:
            import ssl
            config.verify_mode = ssl.CERT_NONE
        self.config = config
        self.conn = None
        self.outbox = []
        self.read_total = 0
        self.fin_read = False
        self.stream_id = None
        if not is_server:
            self.conn = self.a["connection"].QuicConnection(configuration=config)
            if self.qlog:
                # aioquic's qlog does not say the datagram size and initial RTT its recovery
                # was built with; qlog's recovery:parameters_set does (ccdiff import reads it).
                _seconds(now_us)
                self.conn._quic_logger.log_event(category="recovery", event="parameters_set", data={
                    "max_datagram_size": config.max_datagram_size,
                    "initial_rtt": config.initial_rtt * 1000, "written_by": "ccdiff connection shim"})
            self.conn.connect(ADDR, now=_seconds(now_us))

    # -- datagrams
    def recv(self, data: bytes, now_us: int) -> None:
        if self.conn is None:       # a server's connection starts with the client's Initial
            header = self.a["packet"].pull_quic_header(self.a["buffer"].Buffer(data=data),
                                                       host_cid_length=self.config.connection_id_length)
            self.conn = self.a["connection"].QuicConnection(
                configuration=self.config, original_destination_connection_id=header.destination_cid)
        self.conn.receive_datagram(data, ADDR, now=_seconds(now_us))
        self._events()

    def send(self, now_us: int):
        if not self.outbox and self.conn is not None:
            self.outbox = [data for data, _ in self.conn.datagrams_to_send(now=_seconds(now_us))]
            self.outbox.reverse()
        if not self.outbox:
            return None
        return self.outbox.pop(), now_us      # paced by aioquic itself (its timer holds the rest)

    def timeout(self, now_us: int):
        if self.conn is None:
            return None
        at = self.conn.get_timer()
        return None if at is None else _micros(at)

    def on_timeout(self, now_us: int) -> None:
        if self.conn is not None:
            self.conn.handle_timer(now=_seconds(now_us))
            self._events()

    # -- the application
    def write(self, length: int, fin: bool, now_us: int) -> int:
        if self.stream_id is None:
            self.stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_stream_data(self.stream_id, bytes(length), end_stream=bool(fin))
        return length

    def read(self, now_us: int) -> int:
        return self.read_total

    def _events(self) -> None:
        events = self.a["events"]
        while (event := self.conn.next_event()) is not None:
            if isinstance(event, events.StreamDataReceived):
                self.read_total += len(event.data)
                self.fin_read = self.fin_read or event.end_stream

    # -- the stack's own state
    def stats(self) -> dict:
        conn = self.conn
        if conn is None:
            return {}
        loss = conn._loss                      # QuicPacketRecovery (quic/recovery.py)
        cc = loss._cc

        def us(seconds):
            return None if seconds is None or math.isinf(seconds) else round(seconds * 1e6)
        return {
            "cwnd": cc.congestion_window, "bytes_in_flight": cc.bytes_in_flight, "ssthresh": cc.ssthresh,
            "smoothed_rtt_us": us(loss._rtt_smoothed) if loss._rtt_initialized else None,
            "min_rtt_us": us(loss._rtt_min), "latest_rtt_us": us(loss._rtt_latest) or None,
            "packets_sent": None, "packets_lost": None, "bytes_sent": None, "congestion_events": None,
            "in_recovery": None,
            "stream_bytes_read": self.read_total, "stream_fin_read": int(self.fin_read),
            "established": int(conn._handshake_complete), "closed": int(conn._close_event is not None),
        }

    def close(self) -> None:
        if self.qlog and self.config.quic_logger is not None:
            import json
            if self.conn is not None:
                self.config.quic_logger.end_trace(self.conn._quic_logger)
            with open(self.qlog, "w") as fh:
                json.dump(self.config.quic_logger.to_dict(), fh)
            self.config.quic_logger = None
        self.conn = None
