"""`ccdiff serve`: offer this machine's built adapters over TCP (protocol: ccdiff/remote.py).

An adapter container runs ``ccdiff serve --stack quiche --port 7000``; the
runner reaches it with ``CCDIFF_REMOTE_QUICHE=quiche:7000``.  Every
connection is served by a forked child process, so an adapter that crashes
(a segfault in C, a panic across the FFI) takes down only its own
connection: the client sees the connection close and reports an error, and
the server keeps serving.
"""
from __future__ import annotations

import json
import socketserver
import sys

from . import __version__
from .errors import SetupError
from .clock import DEFAULT_CLOCK_BASE_US
from .native import ABI_VERSION, AdapterError, NativeController
from .snapshot import Snapshot
from .stacks import available, load_recipes, resolve

MAX_LINE = 64 << 20   # one step batch; far above BATCH events of any real trace


class Event:
    """A resolved event rebuilt from remote.encode_event (what NativeController.step reads)."""

    __slots__ = ("kind", "t", "bytes_in_flight", "packets", "spurious", "ack_delay",
                 "app_limited", "ecn_ce", "rtt")

    def __init__(self, values: list):
        (self.kind, self.t, self.bytes_in_flight, packets, spurious, self.ack_delay,
         self.app_limited, self.ecn_ce, rtt) = values
        self.packets = [tuple(p) for p in packets]
        self.spurious = [tuple(p) for p in spurious]
        self.rtt = tuple(rtt)


def served_versions(stack: str | None) -> dict:
    """stack -> built versions this server can open."""
    out: dict = {}
    for row in available():
        if row["version"] and row["built"] and row["stack"] in load_recipes() and \
                (stack is None or row["stack"] == stack):
            out.setdefault(row["stack"], []).append(row["version"])
    return out


class Session:
    """One connection: at most one open controller."""

    def __init__(self, stack: str | None):
        self.stack = stack
        self.controller: NativeController | None = None

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "hello":
            return {"ok": True, "abi": ABI_VERSION, "ccdiff": __version__, "stack": self.stack,
                    "versions": served_versions(self.stack)}
        if op == "open":
            return self.open(request)
        if op == "step":
            return self.step(request.get("events") or [])
        if op == "close":
            self.close()
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def open(self, request: dict) -> dict:
        name = request.get("stack")
        if self.stack is not None and name != self.stack:
            return {"ok": False, "error": f"this server offers {self.stack}, not {name}"}
        spec = f"{name}@{request.get('version')}" + (f":{request['options']}" if request.get("options") else "")
        try:
            target = resolve(spec)
            if target.kind != "native":
                raise SetupError(f"{spec}: not an adapter stack")
            library = target.recipe.library(target.version)
            if not library.exists():
                raise SetupError(f"{target.recipe.name}@{target.version} is not built in this "
                                 f"container (built: {served_versions(self.stack)})")
            self.close()
            self.controller = NativeController(str(library), int(request["max_datagram_size"]),
                                               int(request["initial_rtt_us"]), target.options_text,
                                               request.get("clock_base_us", DEFAULT_CLOCK_BASE_US))
        except (SetupError, KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "description": self.controller.description}

    def step(self, events: list) -> dict:
        if self.controller is None:
            return {"ok": False, "error": "step before open"}
        snapshots, error = [], None
        for values in events:
            try:
                snap: Snapshot = self.controller.step(Event(values))
            except (AdapterError, ArithmeticError, ValueError, TypeError) as exc:
                error = str(exc)
                break
            snapshots.append(list(snap))
        return {"ok": True, "snapshots": snapshots, "error": error}

    def close(self) -> None:
        if self.controller is not None:
            self.controller.close()
            self.controller = None


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        session = Session(self.server.stack)
        try:
            while True:
                line = self.rfile.readline(MAX_LINE)
                if not line:
                    break
                try:
                    request = json.loads(line)
                    reply = session.handle(request) if isinstance(request, dict) else \
                        {"ok": False, "error": "expected a JSON object"}
                except ValueError as exc:
                    reply = {"ok": False, "error": f"bad request: {exc}"}
                self.wfile.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
                self.wfile.flush()
        finally:
            session.close()


class Server(socketserver.ForkingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address, stack):
        self.stack = stack
        super().__init__(address, Handler)


def serve(host: str, port: int, stack: str | None) -> int:
    recipes = load_recipes()
    if stack is not None and stack not in recipes:
        raise SetupError(f"unknown stack {stack!r}; adapter stacks: {', '.join(sorted(recipes))}")
    versions = served_versions(stack)
    if not versions:
        raise SetupError(f"no built adapter to serve{' for ' + stack if stack else ''}; "
                         "run `ccdiff build` first")
    try:
        server = Server((host, port), stack)
    except OSError as exc:
        raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    with server:
        offered = ", ".join(f"{s}@{v}" for s, vs in versions.items() for v in vs)
        print(f"ccdiff serve: {offered} on {host}:{server.server_address[1]}", file=sys.stderr, flush=True)
        server.serve_forever()
    return 0
