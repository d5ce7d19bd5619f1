"""`ccdiff serve`: offer this machine's built adapters over TCP (protocol: ccdiff/remote.py).

An adapter container runs ``ccdiff serve --stack quiche --port 7000``; the
runner reaches it with ``CCDIFF_REMOTE_QUICHE=quiche:7000``.  Every
connection is served by a forked child process, so an adapter that crashes
(a segfault in C, a panic across the FFI) takes down only its own
connection: the client sees the connection close and reports an error, and
the server keeps serving.

Bounds (issue 22): at most MAX_CONNECTIONS children at once, reaped without
waiting, and a client beyond that is told "busy" at once instead of blocking
the accept loop (the standard ForkingMixIn waits for a child to exit once it
has 40, so 40 idle connections froze the server); a connection idle for
IDLE_TIMEOUT seconds is closed; a request line is at most MAX_REQUEST bytes
and every value is range-checked before it reaches ctypes or struct (which
wrapped a max_datagram_size of 2**32 + 1200 to 1200).  With a token
(CCDIFF_SERVE_TOKEN or --token-file, never on the command line where `ps` shows it)
every request must carry it, and a connection is authenticated before the server reads
more than a short first line: that line (at most MAX_AUTH_LINE bytes, within AUTH_TIMEOUT
seconds however slowly it trickles in) must carry the token, or the connection is closed.
A stranger without the token can so hold neither memory nor, for long, a connection slot;
and no single source address may hold more than MAX_UNAUTHENTICATED_PER_SOURCE connections
younger than AUTH_TIMEOUT (the only ones that can still be unauthenticated: an older one
has shown the token, or is gone).
"""
from __future__ import annotations

import contextlib
import ctypes
import hmac
import json
import os
import signal
import socketserver
import sys
import time

from . import __version__
from .errors import SetupError
from .clock import DEFAULT_CLOCK_BASE_US, MAX_CLOCK_BASE_US
from .native import ABI_VERSION, AdapterError, NativeController
from .snapshot import Snapshot
from .stacks import available, load_recipes, open_adapter, resolve
from .reach import DEFAULT_MAX_ACK_DELAY_US
from .trace import MAX_ACK_DELAY_LIMIT_US, MAX_PACKET_BYTES, MAX_PN, MAX_PNS_PER_EVENT, MAX_TIME_US

# One step batch (remote.BATCH events) as JSON: an ACK of MAX_PNS_PER_EVENT packets is
# ~30 MB, parsed at ~12 bytes of memory per byte; CCDIFF_SERVE_MAX_REQUEST_MB lowers it
# for a small container.
MAX_REQUEST = int(os.environ.get("CCDIFF_SERVE_MAX_REQUEST_MB", "48")) << 20
MAX_CONNECTIONS = 512
IDLE_TIMEOUT = float(os.environ.get("CCDIFF_SERVE_IDLE_TIMEOUT", "600"))   # seconds between requests
MAX_BATCH = 4096            # events per step request (the client sends 2048)
EVENT_KINDS = range(1, 7)   # enum ccd_event_kind: CCD_SENT .. CCD_APP_DATA (ccdiff_adapter.h)
TOKEN_ENV = "CCDIFF_SERVE_TOKEN"
MAX_AUTH_LINE = 64 << 10    # the first request of a connection, before the token is checked
AUTH_TIMEOUT = float(os.environ.get("CCDIFF_SERVE_AUTH_TIMEOUT", "10"))   # seconds, in all
MAX_UNAUTHENTICATED_PER_SOURCE = 64   # with a token: connections still within AUTH_TIMEOUT, per address


class BadRequest(ValueError):
    """A request value out of its range: refused with a message, never wrapped."""


def _int_in(value, low: int, high: int, what: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise BadRequest(f"{what} must be an integer in [{low}, {high}], got {json.dumps(value)[:40]}")
    return value


def _packet(values, what: str) -> tuple:
    if not isinstance(values, list) or len(values) != 4:
        raise BadRequest(f"{what} must be [pn, sent_us, bytes, app_limited]")
    pn, sent, size, app_limited = values
    if app_limited not in (0, 1) or type(app_limited) not in (bool, int):
        raise BadRequest(f"{what} app_limited must be true, false, 0 or 1")
    return (_int_in(pn, 0, MAX_PN, f"{what} pn"), _int_in(sent, 0, MAX_TIME_US, f"{what} sent_us"),
            _int_in(size, 1, MAX_PACKET_BYTES, f"{what} bytes"), int(app_limited))


class Event:
    """A resolved event rebuilt from remote.encode_event (what NativeController.step reads)."""

    __slots__ = ("kind", "t", "bytes_in_flight", "packets", "spurious", "ack_delay",
                 "app_limited", "ecn_ce", "rtt", "stack_rtt")

    def __init__(self, values: list):
        if not isinstance(values, list) or len(values) not in (9, 10):
            raise BadRequest("an event is a list of 9 values, or 10 with the stack's RTT sample "
                             "(remote.encode_event)")
        (kind, t, bytes_in_flight, packets, spurious, ack_delay, app_limited, ecn_ce, rtt) = values[:9]
        self.kind = _int_in(kind, EVENT_KINDS.start, EVENT_KINDS.stop - 1, "kind")
        self.t = _int_in(t, 0, MAX_TIME_US, "t")
        self.bytes_in_flight = _int_in(bytes_in_flight, 0, 2**62, "bytes_in_flight")
        for name, items in (("packets", packets), ("spurious", spurious)):
            if not isinstance(items, list) or len(items) > MAX_PNS_PER_EVENT:
                raise BadRequest(f"{name} must be a list of at most {MAX_PNS_PER_EVENT} packets")
        self.packets = [_packet(p, "packet") for p in packets]
        self.spurious = [_packet(p, "spurious packet") for p in spurious]
        self.ack_delay = _int_in(ack_delay, 0, MAX_TIME_US, "ack_delay")
        if not isinstance(app_limited, bool) or not isinstance(ecn_ce, bool):
            raise BadRequest("app_limited and ecn_ce must be true or false")
        self.app_limited, self.ecn_ce = app_limited, ecn_ce
        if not isinstance(rtt, list) or len(rtt) != 4:
            raise BadRequest("rtt must be [latest, smoothed, rttvar, min]")
        self.rtt = tuple(_int_in(v, 0, MAX_TIME_US, "rtt") for v in rtt)
        self.stack_rtt = _int_in(values[9], 1, MAX_TIME_US, "stack_rtt") if len(values) == 10 else None


def served_versions(stack: str | None) -> dict:
    """stack -> built versions this server can open."""
    out: dict = {}
    for row in available():
        if row["version"] and row["built"] and row["stack"] in load_recipes() and \
                (stack is None or row["stack"] == stack):
            out.setdefault(row["stack"], []).append(row["version"])
    return out


def build_identities(versions: dict) -> dict:
    """stack -> version -> what the build is (ccdiff/shard.py build_info_identity): the
    shards of `conform --shard` run against containers record it, and `merge` refuses
    shards whose containers served different builds."""
    from .shard import build_info_identity
    recipes = load_recipes()
    return {stack: {v: build_info_identity(recipes[stack], v) for v in vs} for stack, vs in versions.items()}


class Session:
    """One connection: at most one open controller."""

    def __init__(self, stack: str | None, token: str = ""):
        self.stack, self.token = stack, token
        self.controller: NativeController | None = None

    def authorized(self, request: dict) -> bool:
        return not self.token or hmac.compare_digest(
            str(request.get("token", "")).encode(errors="replace"), self.token.encode())

    def handle(self, request: dict) -> dict:
        if not self.authorized(request):
            return {"ok": False, "error": f"this server needs a token ({TOKEN_ENV} on both sides)"}
        op = request.get("op")
        if op == "hello":
            versions = served_versions(self.stack)
            return {"ok": True, "abi": ABI_VERSION, "ccdiff": __version__, "stack": self.stack,
                    "versions": versions, "builds": build_identities(versions)}
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
            size = _int_in(request.get("max_datagram_size"), 1200, MAX_PACKET_BYTES, "max_datagram_size")
            rtt = _int_in(request.get("initial_rtt_us"), 1, 60_000_000, "initial_rtt_us")   # as a trace header
            self.close()
            base = _int_in(request.get("clock_base_us", DEFAULT_CLOCK_BASE_US), 1, MAX_CLOCK_BASE_US, "clock_base_us")
            ack_delay = _int_in(request.get("max_ack_delay_us", DEFAULT_MAX_ACK_DELAY_US), 0,
                                MAX_ACK_DELAY_LIMIT_US, "max_ack_delay_us")     # as a trace header
            self.controller = open_adapter(target.recipe, library, size, rtt, target.options_text, base,
                                           ack_delay)
        except (SetupError, KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "description": self.controller.description}

    def step(self, events: list) -> dict:
        if self.controller is None:
            return {"ok": False, "error": "step before open"}
        if not isinstance(events, list) or len(events) > MAX_BATCH:
            return {"ok": False, "error": f"events must be a list of at most {MAX_BATCH}"}
        try:
            checked = [Event(values) for values in events]   # the whole batch, before any step
        except BadRequest as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        snapshots, error = [], None
        for event in checked:
            try:
                snap: Snapshot = self.controller.step(event)
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
    timeout = IDLE_TIMEOUT      # socket timeout: an idle connection ends its child

    def setup(self) -> None:
        # In the forked child: die with the server.  SIGKILL, because a child hung inside a
        # stack's C code never runs a Python signal handler.
        from .isolation import PR_SET_PDEATHSIG
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != self.server.pid:      # the server died before prctl took effect
            os._exit(1)
        super().setup()

    def handle(self) -> None:
        session = Session(self.server.stack, self.server.token)
        try:
            if self.server.token and not self.authenticate(session):
                return
            while True:
                try:
                    line = self.rfile.readline(MAX_REQUEST + 1)
                except OSError:           # idle too long, or the client reset the connection
                    break
                if not line:
                    break
                if len(line) > MAX_REQUEST:
                    self.reply({"ok": False, "error": f"request larger than {MAX_REQUEST >> 20} MiB"})
                    break                 # the rest of the line cannot be framed: close
                try:
                    request = json.loads(line)
                    reply = session.handle(request) if isinstance(request, dict) else \
                        {"ok": False, "error": "expected a JSON object"}
                except (ValueError, RecursionError) as exc:
                    reply = {"ok": False, "error": f"bad request: {exc}"}
                if not self.reply(reply):
                    break
        finally:
            session.close()

    def authenticate(self, session: Session) -> bool:
        """The first request, read with a small size bound and a deadline for the whole line
        (an alarm: a socket timeout would be renewed by every byte), must carry the token;
        it is then answered as any request.  Returns whether the connection goes on."""
        def too_slow(signum, frame):
            raise TimeoutError
        previous = signal.signal(signal.SIGALRM, too_slow)
        signal.setitimer(signal.ITIMER_REAL, AUTH_TIMEOUT)
        try:
            line = self.rfile.readline(MAX_AUTH_LINE + 1)
        except (OSError, TimeoutError):
            return False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        try:
            request = json.loads(line) if line.endswith(b"\n") else None
        except (ValueError, RecursionError):
            request = None
        if not isinstance(request, dict) or not session.authorized(request):
            self.reply({"ok": False, "error": f"this server needs a token ({TOKEN_ENV} on both sides)"})
            return False
        return self.reply(session.handle(request))

    def reply(self, message: dict) -> bool:
        try:
            self.wfile.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            self.wfile.flush()
            return True
        except OSError:
            return False


class Server(socketserver.ForkingTCPServer):
    """A child per connection, at most MAX_CONNECTIONS, and an accept loop that never waits
    for one to exit."""
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128
    max_children = MAX_CONNECTIONS

    def __init__(self, address, stack, token: str = ""):
        self.stack, self.token, self.pid = stack, token, os.getpid()
        self.source_of: dict = {}           # child pid -> (the address it serves, when it started)
        super().__init__(address, Handler)

    def process_request(self, request, client_address):
        self.collect_children(blocking=False)
        busy = None
        if self.active_children is not None and len(self.active_children) >= self.max_children:
            busy = b"too many connections"
        elif self.token and self.unauthenticated(client_address[0]) >= MAX_UNAUTHENTICATED_PER_SOURCE:
            busy = b"too many new connections from one address"
        if busy:
            with contextlib.suppress(OSError):
                request.sendall(b'{"ok":false,"error":"server busy: ' + busy + b'"}\n')
            self.shutdown_request(request)
            return
        before = set(self.active_children or ())
        super().process_request(request, client_address)
        for pid in set(self.active_children or ()) - before:
            self.source_of[pid] = (client_address[0], time.monotonic())

    def unauthenticated(self, address: str) -> int:
        """Connections from `address` that may not have shown the token yet."""
        since = time.monotonic() - AUTH_TIMEOUT
        return sum(1 for a, started in self.source_of.values() if a == address and started > since)

    def collect_children(self, *, blocking=False):
        # ForkingMixIn waits (blocks the accept loop) when it holds max_children: reap only
        # the children that already exited, and let process_request refuse beyond the cap.
        if self.active_children is None:
            return
        for pid in list(self.active_children):
            try:
                done, _ = os.waitpid(pid, 0 if blocking else os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.active_children.discard(pid)
                self.source_of.pop(pid, None)


def serve(host: str, port: int, stack: str | None, token: str = "") -> int:
    recipes = load_recipes()
    if stack is not None and stack not in recipes:
        raise SetupError(f"unknown stack {stack!r}; adapter stacks: {', '.join(sorted(recipes))}")
    versions = served_versions(stack)
    if not versions:
        raise SetupError(f"no built adapter to serve{' for ' + stack if stack else ''}; "
                         "run `ccdiff build` first")
    try:
        server = Server((host, port), stack, token)
    except OSError as exc:
        raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    with server:
        offered = ", ".join(f"{s}@{v}" for s, vs in versions.items() for v in vs)
        print(f"ccdiff serve: {offered} on {host}:{server.server_address[1]}"
              f"{' (token required)' if token else ''}", file=sys.stderr, flush=True)
        server.serve_forever()
    return 0
