"""Connection mode's driver (ccdiff/connection/): determinism, the path, the verdicts, bad shims.

The stack runs here are aioquic's own client and server (its pinned sdist, built by
implementations/aioquic/connection/build.sh); the fault cases load small shims of
the test's own that break the contract on purpose, as tests/fault_adapters.py does
for the adapter contract.  No shim here stands in for a stack in a conformance claim.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from ccdiff.connection import run_connection
from ccdiff.connection import run as run_module
from ccdiff.connection.path import LOST, Path
from ccdiff.connection.shim import ShimError
from ccdiff.errors import SetupError
from ccdiff.sim.scenario import load_scenario

REPO = pathlib.Path(__file__).resolve().parents[2]
DEATH = load_scenario("death-spiral")
SMALL = DEATH.with_params(bytes=400_000, deadline_us=5_000_000)


def test_same_scenario_and_seed_give_a_byte_identical_record():
    a = run_connection(SMALL, "aioquic", 7)
    b = run_connection(SMALL, "aioquic", 7)
    assert a.record_text() == b.record_text()
    assert a.metrics == b.metrics and a.status == b.status == "pass"
    # The record is the real exchange: a handshake both ways, then the data.
    froms = {r["from"] for r in a.records if "from" in r}
    assert froms == {"client", "server"}
    assert a.metrics["delivered_bytes"] == 400_000
    assert a.metrics["handshake_us"] is not None and a.metrics["handshake_us"] >= DEATH.base_rtt_us


def test_the_seed_drives_the_path_losses():
    a, b = run_connection(SMALL, "aioquic", 1), run_connection(SMALL, "aioquic", 2)
    assert a.metrics["path_losses"] > 0 and b.metrics["path_losses"] > 0
    assert a.record_text() != b.record_text()


def test_the_death_spiral_path_completes_for_aioquic_and_its_window_is_read_from_the_stack():
    result = run_connection(DEATH, "aioquic", 3)
    assert result.status == "pass", result.reasons
    cwnds = [r["cwnd"] for r in result.records if "cwnd" in r]
    # aioquic's own window: the 10-datagram initial window of aioquic (K_INITIAL_WINDOW) first,
    # and at least one reduction (the path loses 30% for 2 s).
    assert cwnds[0] == 10 * DEATH.max_datagram_size
    assert any(b < a for a, b in zip(cwnds, cwnds[1:]))


def test_the_deadline_fails_a_run_that_cannot_finish():
    tight = SMALL.with_params(deadline_us=50_000)
    result = run_connection(tight, "aioquic", 1)
    assert result.status == "fail"
    assert result.reasons == [f"deadline: {result.metrics['delivered_bytes']:,} of 400,000 bytes delivered "
                              "by t=50000 us"]


def test_a_stack_without_a_shim_and_a_bad_option_are_refused_by_name():
    with pytest.raises(SetupError, match="oracle has no connection shim"):
        run_connection(SMALL, "oracle", 1)
    with pytest.raises(SetupError, match="refused to start: .*cc=bogus: expected cubic or reno"):
        run_connection(SMALL, "aioquic:cc=bogus", 1)
    with pytest.raises(SetupError, match="cannot carry a path with ';'"):
        run_connection(SMALL, "aioquic", 1, qlog="a;b.qlog")


# -- the path -------------------------------------------------------------------
def test_a_blackout_loses_both_ways_and_the_return_path_keeps_order():
    s = SMALL.with_params(blackouts=((1_000, 2_000),), jitter_us=3_000, loss_schedule=())
    path = Path(s, 0)
    assert path.to_server(1_500, 1350) == LOST and path.to_client(1_500) == LOST
    arrivals = [path.to_client(t) for t in range(3_000, 3_100)]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 3_000 + s.base_rtt_us // 2


def test_the_forward_path_is_the_bottleneck():
    path = Path(SMALL.with_params(loss_schedule=()), 0)
    first, second = path.to_server(0, 1350), path.to_server(0, 1350)
    serialization = -(-1350 * 1_000_000 // SMALL.rate_bytes_per_s)
    assert second - first == serialization


# -- shims that break the contract ------------------------------------------------
class _Silent:
    """Never sends, never arms a timer: the run must end as a deadlock, not spin."""
    def recv(self, data, now): pass
    def send(self, now): return None
    def timeout(self, now): return None
    def on_timeout(self, now): pass
    def write(self, n, fin, now): return n
    def read(self, now): return 0
    def stats(self): return {"cwnd": 2700}
    def close(self): pass


class _Raises(_Silent):
    def timeout(self, now): return 5
    def on_timeout(self, now): raise ShimError("on_timeout: panicked at 'boom' (src/lib.rs:1)")


class _StuckTimer(_Silent):
    def timeout(self, now): return 7


def _run_with(monkeypatch, endpoint_class):
    def fake_open(path):
        return lambda is_server, now, seed, options: endpoint_class()
    monkeypatch.setattr(run_module, "open_shim", fake_open)
    monkeypatch.setattr(run_module, "ensure_shim", lambda target: None)
    return run_connection(SMALL, "aioquic", 1)


def test_a_shim_that_does_nothing_ends_as_a_deadlock(monkeypatch):
    result = _run_with(monkeypatch, _Silent)
    assert result.status == "fail"
    assert result.reasons[0].startswith("liveness: no timer and nothing in flight at t=0 us")


def test_a_stack_failure_is_the_stack_s_error_with_its_message(monkeypatch):
    result = _run_with(monkeypatch, _Raises)
    assert result.status == "error"
    assert result.reasons == ["stack-error: t=5 us: on_timeout: panicked at 'boom' (src/lib.rs:1)"]


class _ClientStuckTimer(_Silent):
    """Only the client's timer is stuck: the run re-calls it 1 us later, then gives up."""
    def __init__(self, is_server):
        self.is_server = is_server

    def timeout(self, now):
        return None if self.is_server else 7


def test_a_timer_that_never_advances_is_cut(monkeypatch):
    result = _run_with(monkeypatch, _StuckTimer)
    assert result.status == "error" and "never advances" in result.reasons[0]
    def fake_open(path):
        return lambda is_server, now, seed, options: _ClientStuckTimer(is_server)
    monkeypatch.setattr(run_module, "open_shim", fake_open)
    result = run_connection(SMALL, "aioquic", 1)
    assert result.status == "error"
    assert result.reasons == ["stack-error: t=10007 us: the client's timer is still due after 10,000 calls, "
                              "1 us apart: it never advances"]


# -- the command ---------------------------------------------------------------
def test_sim_mode_connection_prints_the_stack_beside_its_closed_loop_and_writes_the_record(tmp_path):
    record = tmp_path / "run.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "sim", "death-spiral", "--mode", "connection",
                           "--stack", "aioquic", "--seed", "2", "--set", "bytes=300000",
                           "--trace", str(record)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "aioquic (own connection)" in proc.stdout and "aioquic (closed loop)" in proc.stdout
    again = run_connection(DEATH.with_params(bytes=300_000), "aioquic", 2)
    assert record.read_text() == again.record_text()


def test_acks_reach_the_client_in_batches_when_the_scenario_aggregates_them():
    path = Path(SMALL.with_params(ack_aggregation_us=4_000, loss_schedule=()), 0)
    assert {path.to_client(t) % 4_000 for t in range(0, 20_000, 333)} == {0}


def test_aioquic_s_growth_in_recovery_is_reached_by_its_own_connection(tmp_path):
    """The confirmation of a finding called real (issue #31 item 4): aioquic 1.7.2's CUBIC
    grows on an ACK of a packet sent before its recovery started (RFC 9002 §7.3.2).  Its
    own connection, on the death-spiral path, seed 3, does it; its own qlog says so (the
    window it logged steps 2,700 -> 3,040 on that ACK) and the adapter agrees."""
    qlog = tmp_path / "client.qlog"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "sim", "death-spiral", "--mode", "connection",
                           "--stack", "aioquic", "--seed", "3", "--qlog", str(qlog), "--no-controls", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    import json
    (run,) = json.loads(proc.stdout)["runs"]
    assert run["status"] == "pass"                    # the transfer itself completes
    found = [f for f in run["own_events"]["findings"] if f["status"] == "violation"]
    assert [f["invariant"] for f in found] == ["growth-in-recovery"]
    assert found[0]["t_us"] == 1_482_853 and "cwnd 2700 -> 3040" in found[0]["detail"]
    assert found[0]["logged_step"] == {"adapter": [2700, 3040], "stack": [2700, 3040], "confirmed": True}
    assert run["own_events"]["fidelity"]["cwnd"]["agreement"] > 0.95


def test_qlog_needs_connection_mode():
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "sim", "death-spiral", "--qlog", "x.qlog"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--qlog is the client's own qlog of --mode connection" in proc.stderr


def test_on_app_limited_the_aioquic_adapter_reproduces_its_own_connection_exactly(tmp_path):
    """Adapter fidelity from a real connection (issue #31 item 5), the short CI form of
    bench/connection_fidelity.py: on the app-limited scenario aioquic's adapter, fed the
    events of aioquic's own connection, gives the window aioquic logged at every point."""
    from ccdiff.connection.confirm import judge_qlog
    qlog = tmp_path / "own.qlog"
    result = run_connection(load_scenario("app-limited"), "aioquic", 0, record=False, qlog=str(qlog))
    assert result.status == "pass"
    judged = judge_qlog(str(qlog), "aioquic")
    cwnd = judged["fidelity"]["cwnd"]
    assert cwnd["compared"] > 500 and cwnd["agreement"] == 1.0 and cwnd["first_divergence"] is None
    assert [f for f in judged["findings"] if f["status"] == "violation"] == []


def test_the_contract_header_compiles_as_c_and_cxx(tmp_path):
    """A C shim includes ccdiff_connection.h as it is (a name both a typedef and a function
    did not compile as C)."""
    header = REPO / "implementations" / "include" / "ccdiff_connection.h"
    for lang in ("c", "c++"):
        proc = subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Werror", "-x", lang, str(header)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


class _TwoDatagramClient(_Silent):
    """Sends two datagrams at t = 0, then nothing."""
    def __init__(self):
        self.left = 2

    def send(self, now):
        if self.left:
            self.left -= 1
            return b"x" * 1350, now
        return None


class _AckingServer(_Silent):
    """Answers what it has received with one 50-byte datagram per send() that finds it
    owing one, and keeps when it read and when it answered."""
    def __init__(self, log):
        self.log, self.owed = log, 0

    def recv(self, data, now):
        self.owed += 1
        self.log.append(("read", now))

    def send(self, now):
        if self.owed:
            self.log.append(("answer", now, self.owed))
            self.owed = 0
            return b"a" * 50, now
        return None


def test_an_endpoint_reads_its_batch_before_it_answers(monkeypatch):
    """rx_batch_us: the two datagrams of a window, 2 us apart on a 10 Gbit/s path, are read
    as one batch and answered once, at the batch's end; without it each is answered alone."""
    def run(batch):
        log = []
        endpoints = iter([_TwoDatagramClient(), _AckingServer(log)])
        monkeypatch.setattr(run_module, "open_shim", lambda path: lambda *args: next(endpoints))
        monkeypatch.setattr(run_module, "ensure_shim", lambda target: None)
        s = SMALL.with_params(rate_bytes_per_s=1_250_000_000, loss_schedule=(), rx_batch_us=batch,
                              deadline_us=100_000)
        run_connection(s, "aioquic", 0)
        return log
    assert run(20) == [("read", 5002), ("read", 5004), ("answer", 5022, 2)]
    assert run(0) == [("read", 5002), ("answer", 5002, 1), ("read", 5004), ("answer", 5004, 1)]


def test_a_shim_is_built_with_the_interpreter_ccdiff_runs_in(tmp_path, monkeypatch):
    """build.sh gets PYTHON = ccdiff's own interpreter: on a Debian python ccdiff lives in a
    .venv (PEP 668), and `python3` on PATH lacks aioquic's cryptography and pylsqpack (the
    bare-machine check failed every aioquic connection test on that)."""
    from ccdiff.connection import build as build_module
    from ccdiff.stacks import resolve

    seen = {}

    def build_sh(cmd, env, **kwargs):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setattr(build_module, "ensure_built", lambda target: None)
    monkeypatch.setattr(build_module, "_source", lambda target: tmp_path)
    monkeypatch.setattr(subprocess, "run", build_sh)
    with pytest.raises(SetupError, match="connection shim failed"):
        build_module.ensure_shim(resolve("aioquic"))
    assert seen["PYTHON"] == sys.executable
