"""A stack adapter in another process or container, driven over TCP (`ccdiff serve`).

When ``CCDIFF_REMOTE_<STACK>=host:port`` is set (STACK is the recipe name in
upper case, ``-`` as ``_``: ``CCDIFF_REMOTE_QUICHE=quiche:7000``), every SPEC
of that stack (any version, option or alias, e.g. ``quiche-reno@0.26.0``)
opens a RemoteController instead of loading the adapter library, so replay,
matrix and everything built on them work unchanged against adapter containers.

Protocol: JSON Lines over one TCP connection per controller; every request
gets exactly one reply, ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.

    {"op": "hello"}                         -> {"ok", "abi", "stack", "versions", "ccdiff"}
    {"op": "open", "stack", "version",
     "options", "max_datagram_size",
     "initial_rtt_us", "clock_base_us",
     "max_ack_delay_us"}                    -> {"ok", "description"}
    {"op": "step", "events": [EVENT, ...]}  -> {"ok", "snapshots": [SNAP, ...], "error": null | "..."}
    {"op": "close"}                         -> {"ok"}

EVENT is a resolved event as a list (`encode_event`), SNAP a Snapshot as a
list.  An ACK that carries the stack's own RTT sample (Resolved.stack_rtt, a trace's
`rtt`) has it as a 10th value; an event without one is the 9 values it always was.  A step batch stops at the first event the adapter refuses: the reply
carries the snapshots before it and the adapter's message.  Replay hands the
controller every resolved event up front (`prefetch`), so a trace costs one
round trip per BATCH events, not one per event.

A container that crashes (connection closed) or hangs (no reply within
CCDIFF_REMOTE_TIMEOUT seconds, default 60) raises AdapterError, which replay
reports as that stack's `adapter-error` finding; the run goes on.  One that
cannot be reached within CCDIFF_REMOTE_CONNECT_WAIT seconds (default 20: a
container that is still starting) is a setup error (exit 2).
"""
from __future__ import annotations

import json
import os
import socket
import time
from itertools import islice

from .clock import DEFAULT_CLOCK_BASE_US
from .reach import DEFAULT_MAX_ACK_DELAY_US
from .errors import SetupError
from .native import AdapterCrash, AdapterError
from .snapshot import Snapshot

BATCH = 2048
# A reply to one batch is ~0.5 MB of snapshots; the bound keeps a bad server from driving
# the client out of memory with one endless line.
MAX_REPLY = 64 << 20
DEFAULT_TIMEOUT = 60.0
CONNECT_WAIT = 20.0       # a freshly started container may not listen yet (CCDIFF_REMOTE_CONNECT_WAIT)


def env_name(stack: str) -> str:
    return "CCDIFF_REMOTE_" + stack.upper().replace("-", "_")


def remote_address(stack: str) -> tuple[str, int] | None:
    """(host, port) from CCDIFF_REMOTE_<STACK>, or None when the stack runs in-process."""
    value = os.environ.get(env_name(stack), "").strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SetupError(f"{env_name(stack)}={value!r}: expected host:port, e.g. quiche:7000")
    return host, int(port)


def _seconds(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        raise SetupError(f"{name}: expected seconds, e.g. {default:g}") from None


def _timeout() -> float | None:
    """Seconds to wait for a reply; 0 means no limit (as conform --timeout 0).  A socket
    timeout of 0 would make every read fail at once and look like a crash."""
    seconds = _seconds("CCDIFF_REMOTE_TIMEOUT", DEFAULT_TIMEOUT)
    if not 0 <= seconds < float("inf"):
        raise SetupError(f"CCDIFF_REMOTE_TIMEOUT={seconds:g}: expected seconds >= 0 (0: no limit)")
    return seconds or None


def encode_event(ev) -> list:
    """A resolved event (ledger.Resolved) as JSON-ready values, in a fixed order."""
    values = [ev.kind, ev.t, ev.bytes_in_flight, [list(p) for p in ev.packets],
              [list(p) for p in ev.spurious], ev.ack_delay, bool(ev.app_limited), bool(ev.ecn_ce),
              list(ev.rtt)]
    stack_rtt = getattr(ev, "stack_rtt", None)
    if stack_rtt is not None:
        values.append(stack_rtt)
    return values


class Connection:
    """One JSON Lines request/reply channel with timeouts."""

    def __init__(self, address: tuple[str, int], label: str):
        self.address, self.label = address, label
        self.where = f"remote adapter {label} at {address[0]}:{address[1]}"
        deadline = time.monotonic() + _seconds("CCDIFF_REMOTE_CONNECT_WAIT", CONNECT_WAIT)
        while True:
            try:
                self.sock = socket.create_connection(address, timeout=5)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise SetupError(f"cannot reach {self.where}: {exc}") from None
                time.sleep(0.2)
        self.sock.settimeout(_timeout())
        self.reader = self.sock.makefile("rb")

    def request(self, message: dict) -> dict:
        token = os.environ.get("CCDIFF_SERVE_TOKEN")
        if token:   # a server started with a token refuses requests without it (serve.py)
            message = {**message, "token": token}
        try:
            self.sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            line = self.reader.readline(MAX_REPLY + 1)
        except socket.timeout:
            raise AdapterCrash(f"{self.where}: no reply within {_timeout():g} s (hung?)") from None
        except OSError as exc:
            raise AdapterCrash(f"{self.where}: {exc}") from None
        if not line:
            raise AdapterCrash(f"{self.where} closed the connection (crashed?)")
        if len(line) > MAX_REPLY:     # a bad server cannot drive the client out of memory
            raise AdapterError(f"{self.where}: a reply larger than {MAX_REPLY >> 20} MiB")
        try:
            reply = json.loads(line)
        except ValueError:
            raise AdapterError(f"{self.where}: unreadable reply {line[:80]!r}") from None
        if not reply.get("ok"):
            raise AdapterError(f"{self.where}: {reply.get('error', 'request failed')}")
        return reply

    def close(self) -> None:
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


_HELLO: dict = {}


def hello(stack: str) -> dict | None:
    """What the server for this stack offers (cached), or None when it is not remote."""
    address = remote_address(stack)
    if address is None:
        return None
    if address not in _HELLO:
        conn = Connection(address, stack)
        try:
            _HELLO[address] = conn.request({"op": "hello"})
        except AdapterError as exc:
            raise SetupError(str(exc)) from None
        finally:
            conn.close()
    return _HELLO[address]


class RemoteController:
    """A controller living in a `ccdiff serve` process; same interface as NativeController."""

    def __init__(self, address: tuple[str, int], target, max_datagram_size: int, initial_rtt_us: int,
                 clock_base_us: int = DEFAULT_CLOCK_BASE_US, max_ack_delay_us: int = DEFAULT_MAX_ACK_DELAY_US):
        self.address, self.label = address, target.label
        self.open_request = {
            "op": "open", "stack": target.recipe.name, "version": target.version,
            "options": target.options_text, "max_datagram_size": max_datagram_size,
            "initial_rtt_us": initial_rtt_us, "clock_base_us": clock_base_us,
            "max_ack_delay_us": max_ack_delay_us}
        self.conn = None
        try:
            reply = self._open()
        except AdapterCrash:
            raise                # the stack's finding (replay records it), not a setup error
        except AdapterError as exc:
            raise SetupError(str(exc)) from None
        self.description = reply.get("description", target.label)
        self._events: list = []      # the resolved events prefetched (a chunk of the run)
        self._next = 0               # index in _events of the next step
        self._base = 0               # events of the run before _events
        self._history = None         # () -> every resolved event of the run, from its start
        self._ready: list = []       # snapshots computed ahead, oldest last
        self._failure: str | None = None

    def _open(self) -> dict:
        if self.conn is not None:
            self.conn.close()
        self.conn = Connection(self.address, self.label)
        try:
            return self.conn.request(self.open_request)
        except AdapterError:
            self.conn.close()
            raise

    def prefetch(self, events: list, history=None) -> None:
        """The run's next events, known in advance (open-loop replay): batch them.  Replay
        hands them a chunk at a time (bounded memory) with history(), which gives every event
        of the run again from its start (to re-send, _localize); without it, events is the
        whole run."""
        self._base += self._next
        self._events, self._next, self._history = events, 0, history

    def step(self, ev) -> Snapshot:
        if not self._ready:
            if self._failure is not None:
                raise AdapterError(self._failure)
            batch = [ev]
            if self._next < len(self._events) and self._events[self._next] is ev:
                batch = self._events[self._next:self._next + BATCH]
            try:
                reply = self.conn.request({"op": "step", "events": [encode_event(e) for e in batch]})
                snaps, self._failure = reply["snapshots"], reply.get("error")
            except AdapterError as exc:
                if len(batch) == 1:
                    raise
                snaps, self._failure = self._localize(batch, str(exc))
            self._ready = [Snapshot(*s) for s in reversed(snaps)]
            if not self._ready:
                raise AdapterError(self._failure or f"{self.conn.where}: no snapshot")
        self._next += 1
        return self._ready.pop()

    def _localize(self, batch: list, failure: str) -> tuple[list, str]:
        """The server died or hung somewhere in a batch: find the event, by re-running.

        Adapters are deterministic, so a fresh controller fed the same events fails at the
        same one; stepping the failed batch one event at a time names it and keeps every
        snapshot before it.  Costs at most one more time limit for a hang.
        """
        try:
            self._open()
            if self._history is not None:
                done = islice(self._history(), self._base + self._next)
            else:
                done = iter(self._events[:self._next])
            while True:
                batch_done = list(islice(done, BATCH))
                if not batch_done:
                    break
                self.conn.request({"op": "step", "events": [encode_event(e) for e in batch_done]})
        except AdapterError:
            return [], failure
        snaps = []
        for event in batch:
            try:
                reply = self.conn.request({"op": "step", "events": [encode_event(event)]})
            except AdapterError as exc:
                return snaps, str(exc)
            snaps.extend(reply["snapshots"])
            if reply.get("error"):
                return snaps, reply["error"]
        return snaps, failure

    def close(self) -> None:
        if self.conn is None:
            return
        try:
            self.conn.request({"op": "close"})
        except AdapterError:
            pass
        self.conn.close()
        self.conn = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
