"""`ccdiff serve` under hostile clients, on loopback: idle connections never lock out a new
client, idle connections end, every request value is range-checked, a request has a size
limit, and a server with a token refuses requests without it."""
from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccdiff.build import ensure_built

ROOT = Path(__file__).resolve().parent.parent
STACK, VERSION = "quiche", "0.30.0"
LIVENESS_SECONDS = 30      # a reply that does not come within this never comes (not a speed target)


@contextlib.contextmanager
def serving(**env):
    ensure_built(f"{STACK}@{VERSION}")
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "serve", "--port", "0", "--stack", STACK], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env))
    try:
        line = proc.stderr.readline()
        assert " on 127.0.0.1:" in line, line
        yield int(line.split(" on 127.0.0.1:")[1].split()[0])
    finally:
        proc.kill()
        proc.wait()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=LIVENESS_SECONDS)


def ask(sock: socket.socket, message) -> dict:
    data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
    sock.sendall(data)
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection without a reply"
        reply += chunk
    return json.loads(reply)


def opened(port: int, **overrides) -> socket.socket:
    sock = connect(port)
    request = {"op": "open", "stack": STACK, "version": VERSION, "max_datagram_size": 1200,
               "initial_rtt_us": 333_000, **overrides}
    reply = ask(sock, request)
    assert reply["ok"], reply
    return sock


def sent_event(**overrides) -> list:
    values = {"kind": 1, "t": 0, "bif": 0, "packets": [[0, 0, 1200, False]], "spurious": [], "ack_delay": 0,
              "app_limited": False, "ecn_ce": False, "rtt": [0, 333_000, 166_500, 0]}
    values.update(overrides)
    return list(values.values())


def test_200_idle_connections_do_not_lock_out_a_new_client():
    with serving() as port:
        idle = [connect(port) for _ in range(200)]
        try:
            with connect(port) as client:    # the ForkingMixIn server stopped accepting at 40 children
                assert ask(client, {"op": "hello"})["ok"]
        finally:
            for sock in idle:
                sock.close()


def test_an_idle_connection_is_closed():
    with serving(CCDIFF_SERVE_IDLE_TIMEOUT="1") as port, connect(port) as sock:
        assert sock.recv(1) == b""       # closed by the server, not by our LIVENESS_SECONDS timeout


@pytest.mark.parametrize("overrides, error", [
    ({"max_datagram_size": 2**32 + 1200}, "max_datagram_size must be an integer in [1200, 65527], got 4294968496"),
    ({"max_datagram_size": 100}, "max_datagram_size must be an integer in [1200, 65527], got 100"),
    ({"initial_rtt_us": -1}, "initial_rtt_us must be an integer in [1, 60000000], got -1"),
    ({"initial_rtt_us": 2**64}, "initial_rtt_us must be an integer in [1, 60000000], got 18446744073709551616"),
    # a u32 in ccd_config: 2**32 + 25000 would reach the adapter as 25 ms
    ({"max_ack_delay_us": 2**32 + 25_000}, "max_ack_delay_us must be an integer in [0, 16383000], got 4294992296"),
])
def test_open_values_out_of_range_are_refused_not_wrapped(overrides, error):
    with serving() as port, connect(port) as sock:
        reply = ask(sock, {"op": "open", "stack": STACK, "version": VERSION, "max_datagram_size": 1200,
                           "initial_rtt_us": 333_000, **overrides})
        assert reply == {"ok": False, "error": error}


@pytest.mark.parametrize("overrides, error", [
    ({"t": 2**64}, "t must be an integer in [0, 9007199254740992], got 18446744073709551616"),
    ({"kind": 2**32 + 1}, "kind must be an integer in [1, 6], got 4294967297"),
    ({"packets": [[0, 0, 2**32 + 1200, False]]}, "packet bytes must be an integer in [1, 65527], got 4294968496"),
    ({"rtt": [0, -1, 0, 0]}, "rtt must be an integer in [0, 9007199254740992], got -1"),
    ({"bif": -1}, "bytes_in_flight must be an integer in [0, 4611686018427387904], got -1"),
])
def test_step_values_out_of_range_are_refused_before_any_step(overrides, error):
    with serving() as port:
        sock = opened(port)
        with sock:
            reply = ask(sock, {"op": "step", "events": [sent_event(), sent_event(**overrides)]})
            assert reply == {"ok": False, "error": f"bad request: {error}"}
            assert ask(sock, {"op": "step", "events": [sent_event()]})["snapshots"], "the session goes on"


def test_a_request_over_the_size_limit_is_refused_and_closed():
    with serving(CCDIFF_SERVE_MAX_REQUEST_MB="1") as port, connect(port) as sock:
        reply = ask(sock, b'{"op": "hello", "pad": "' + b"x" * (2 << 20) + b'"}\n')
        assert reply == {"ok": False, "error": "request larger than 1 MiB"}
        assert sock.recv(1) == b""


def test_a_token_is_required_when_set():
    """A first request without the right token is answered once, then the connection ends."""
    with serving(CCDIFF_SERVE_TOKEN="s3cret") as port:
        for request in ({"op": "hello"}, {"op": "hello", "token": "wrong"}, b"[]\n"):
            with connect(port) as sock:
                assert ask(sock, request) == {"ok": False, "error": "this server needs a token "
                                                                    "(CCDIFF_SERVE_TOKEN on both sides)"}
                assert sock.recv(1) == b""
        with connect(port) as sock:
            assert ask(sock, {"op": "hello", "token": "s3cret"})["ok"] is True
            assert ask(sock, {"op": "hello", "token": "s3cret"})["ok"] is True


def test_a_stranger_is_cut_off_before_the_server_reads_a_large_line():
    """Issue #32: an unauthenticated 47 MiB line drove a child to 1.28 GB; now the first line
    may be 64 KiB, and must arrive whole within CCDIFF_SERVE_AUTH_TIMEOUT, however slowly."""
    with serving(CCDIFF_SERVE_TOKEN="s3cret", CCDIFF_SERVE_AUTH_TIMEOUT="1") as port:
        with connect(port) as sock:
            sock.sendall(b'{"op": "hello", "pad": "' + b"x" * (1 << 20))
            assert b"needs a token" in sock.recv(4096)
        with connect(port) as sock:            # a byte now and then renews nothing
            started = time.monotonic()
            for _ in range(30):
                try:
                    sock.sendall(b" ")
                except OSError:
                    break
                if select.select([sock], [], [], 0.1)[0]:
                    break
            assert sock.recv(4096) in (b"", b'{"ok":false,"error":"this server needs a token (CCDIFF_SERVE_TOKEN on both sides)"}\n')
            assert time.monotonic() - started < 2.5
        with connect(port) as sock:            # the slots it held are free again
            assert ask(sock, {"op": "hello", "token": "s3cret"})["ok"] is True
        strangers = [connect(port) for _ in range(80)]     # more new connections than one address may hold
        try:
            replies = []
            for sock in strangers[-10:]:
                with contextlib.suppress(OSError):
                    replies.append(sock.recv(4096))
            assert b'{"ok":false,"error":"server busy: too many new connections from one address"}\n' in replies
        finally:
            for sock in strangers:
                sock.close()


def test_the_token_is_never_a_command_line_argument(tmp_path, capsys):
    from ccdiff.cli import main
    with pytest.raises(SystemExit):
        main(["serve", "--token", "s3cret"])
    assert "unrecognized arguments: --token" in capsys.readouterr().err
    secret = tmp_path / "token"
    secret.write_text("")
    assert main(["serve", "--token-file", str(secret)]) == 2
    assert "expected one line of 1 to 4096 visible ASCII characters" in capsys.readouterr().err


def test_a_client_with_the_token_replays_remotely():
    with serving(CCDIFF_SERVE_TOKEN="s3cret") as port:
        env = dict(os.environ, CCDIFF_BUILD_DIR="/nonexistent", CCDIFF_SERVE_TOKEN="s3cret",
                   CCDIFF_REMOTE_QUICHE=f"127.0.0.1:{port}")
        done = subprocess.run([sys.executable, "-m", "ccdiff", "replay", "examples/death-spiral.jsonl", "--stack",
                               f"{STACK}@{VERSION}"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        env.pop("CCDIFF_SERVE_TOKEN")
        done = subprocess.run([sys.executable, "-m", "ccdiff", "replay", "examples/death-spiral.jsonl", "--stack",
                               f"{STACK}@{VERSION}"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and "needs a token" in done.stderr, done.stderr[-2000:]


def test_isolate_with_timeout_0_means_no_limit():
    """conform --timeout 0 is no limit; replay --isolate --timeout 0 was a socket timeout of
    0 s, so every reply looked like a crash."""
    ensure_built(f"{STACK}@{VERSION}")
    done = subprocess.run([sys.executable, "-m", "ccdiff", "replay", "examples/death-spiral.jsonl", "--isolate",
                           "--timeout", "0", "--stack", f"{STACK}@{VERSION}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
