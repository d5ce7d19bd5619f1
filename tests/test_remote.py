"""`ccdiff serve` + remote controllers (what the adapter containers run), without Docker.

A remote stack must give the same findings as the in-process adapter, byte for
byte, and a crashed or hung server must end as a reported error, not a hang.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ccdiff.build import ensure_built
from ccdiff.stacks import load_recipes

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["examples/death-spiral.jsonl", "examples/idle-restart.jsonl"]
# Every stack of implementations/, so a new one is served (and compared) too.
STACKS = sorted(load_recipes())


def ccdiff(*args, env=None, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "ccdiff", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def server():
    """`ccdiff serve` on a free port, serving every built adapter."""
    for spec in ("quiche@0.26.0", "quiche@0.30.0", "ngtcp2@1.25.0", "picoquic@1.1.53.0", "aioquic@1.7.2"):
        ensure_built(spec)
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "serve", "--port", "0"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    assert " on 127.0.0.1:" in line, line
    port = int(line.rsplit(":", 1)[1])
    yield proc, port
    proc.kill()
    proc.wait()


def remote_env(port, build_dir="/nonexistent", **extra):
    env = dict(os.environ, CCDIFF_BUILD_DIR=build_dir, **extra)
    for stack in STACKS:
        env["CCDIFF_REMOTE_" + stack.upper().replace("-", "_")] = f"127.0.0.1:{port}"   # ccdiff/remote.py
    return env


def test_remote_matrix_is_byte_identical_to_native(server, tmp_path):
    _, port = server
    native = ccdiff("matrix", *EXAMPLES, "--json", str(tmp_path / "native.json"))
    remote = ccdiff("matrix", *EXAMPLES, "--json", str(tmp_path / "remote.json"), env=remote_env(port))
    assert native.returncode == remote.returncode == 1
    doc = json.loads((tmp_path / "remote.json").read_text())
    # The remote side really served the stacks (no library in /nonexistent).
    assert "quiche@0.26.0" in doc["stacks"] and "picoquic@1.1.53.0" in doc["stacks"]
    assert "aioquic@1.7.2" in doc["stacks"]       # a Python adapter, served like a library
    assert any(f["stack"] == "quiche@0.26.0" and f["invariant"] == "future-recovery-start"
               for f in doc["findings"])
    assert (tmp_path / "remote.json").read_bytes() == (tmp_path / "native.json").read_bytes()


def test_remote_replay_shows_the_death_spiral(server):
    _, port = server
    proc = ccdiff("replay", EXAMPLES[0], "--stack", "quiche@0.26.0", "--stack", "quiche-reno@0.30.0",
                  env=remote_env(port))
    assert proc.returncode == 1
    assert "future-recovery-start" in proc.stdout and "stuck-at-minimum" in proc.stdout


def test_remote_option_errors_come_back_as_setup_errors(server):
    _, port = server
    proc = ccdiff("replay", EXAMPLES[0], "--stack", "quiche@0.30.0:cc=bbr", env=remote_env(port))
    assert proc.returncode == 2
    assert "remote adapter quiche@0.30.0:cc=bbr" in proc.stderr


def test_unreachable_server_is_a_setup_error():
    with socket.socket() as s:           # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = remote_env(port, CCDIFF_REMOTE_CONNECT_WAIT="1")
    start = time.monotonic()
    proc = ccdiff("replay", EXAMPLES[0], "--stack", "ngtcp2@1.25.0", env=env)
    assert proc.returncode == 2 and "cannot reach remote adapter" in proc.stderr
    assert time.monotonic() - start < 20


def test_bad_remote_address_is_a_setup_error():
    env = dict(os.environ, CCDIFF_REMOTE_QUICHE="quiche")
    proc = ccdiff("replay", EXAMPLES[0], "--stack", "quiche@0.26.0", env=env)
    assert proc.returncode == 2 and "CCDIFF_REMOTE_QUICHE='quiche': expected host:port" in proc.stderr


def fake_server(mode):
    """Answers hello/open like `ccdiff serve`, then on the first step hangs or crashes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            reader = conn.makefile("rb")
            for line in reader:
                op = json.loads(line)["op"]
                if op == "hello":
                    reply = {"ok": True, "versions": {"quiche": ["0.26.0"]}}
                elif op == "open":
                    reply = {"ok": True, "description": "fake"}
                elif mode == "crash":
                    conn.shutdown(socket.SHUT_RDWR)
                    break
                else:
                    stop.wait(30)     # hang: never answer
                    break
                conn.sendall(json.dumps(reply).encode() + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    return listener, stop


@pytest.mark.parametrize("mode,message", [("crash", "closed the connection (crashed?)"),
                                          ("hang", "no reply within 2 s (hung?)")])
def test_crashed_or_hung_adapter_is_an_error_finding(mode, message, tmp_path):
    listener, stop = fake_server(mode)
    port = listener.getsockname()[1]
    env = dict(os.environ, CCDIFF_REMOTE_QUICHE=f"127.0.0.1:{port}", CCDIFF_REMOTE_TIMEOUT="2")
    out = tmp_path / "out.json"
    start = time.monotonic()
    try:
        proc = ccdiff("replay", EXAMPLES[0], "--stack", "quiche@0.26.0", "--json", str(out), env=env)
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - start < 30
    assert proc.returncode == 1
    doc = json.loads(out.read_text())
    [stack] = doc["stacks"]
    assert message in stack["error"]
    assert [f["invariant"] for f in doc["findings"]] == ["adapter-error"]


def test_the_stacks_rtt_sample_travels_as_a_tenth_value():
    """An ACK with the stack's own RTT sample (a trace's `rtt`) is encoded with it as a 10th
    value and rebuilt so; every other event stays the 9 values older servers read."""
    from ccdiff.ledger import Ledger
    from ccdiff.remote import encode_event
    from ccdiff.serve import BadRequest, Event
    from ccdiff.trace import parse_trace_text
    trace = parse_trace_text('{"ccdiff_trace": 1}\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}\n'
                             '{"t": 0, "ev": "sent", "pn": 1, "bytes": 1200}\n'
                             '{"t": 9000, "ev": "ack", "pns": [0], "rtt": 9312}\n{"t": 9100, "ev": "ack", "pns": [1]}\n')
    ledger = Ledger(trace.header)
    values = [encode_event(ledger.resolve(ev)) for ev in trace.events]
    assert [len(v) for v in values] == [9, 9, 10, 9]
    assert [Event(v).stack_rtt for v in values] == [None, None, 9312, None]
    with pytest.raises(BadRequest, match="stack_rtt must be an integer in"):
        Event(values[2][:9] + [0])


def test_session_refuses_what_it_does_not_serve():
    from ccdiff.serve import Session
    session = Session("ngtcp2")
    assert session.handle({"op": "step", "events": []}) == {"ok": False, "error": "step before open"}
    assert "unknown op" in session.handle({"op": "reboot"})["error"]
    reply = session.handle({"op": "open", "stack": "quiche", "version": "0.26.0", "options": "",
                            "max_datagram_size": 1200, "initial_rtt_us": 333000})
    assert reply == {"ok": False, "error": "this server offers ngtcp2, not quiche"}
    reply = Session(None).handle({"op": "open", "stack": "quiche", "version": "9.9.9", "options": "",
                                  "max_datagram_size": 1200, "initial_rtt_us": 333000})
    assert not reply["ok"] and "quiche@9.9.9 is not built" in reply["error"]   # any release builds by name


def test_serve_with_nothing_built_exits_2(tmp_path):
    proc = ccdiff("serve", "--port", "0", env=dict(os.environ, CCDIFF_BUILD_DIR=str(tmp_path)))
    assert proc.returncode == 2 and "no built adapter to serve" in proc.stderr
