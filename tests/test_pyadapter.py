"""The Python adapter contract (ccdiff/pyadapter.py): a `language = "python"` stack is built,
listed, opened and isolated like a native one.

A scratch stack `pyfake` (a recipe whose build.sh copies a tiny adapter module) checks what
a real stack cannot be made to do on purpose: hang inside a step (cut by --isolate's step
timeout, an adapter-error finding, the other stacks' runs go on), return a malformed
snapshot, refuse an option at open (exit 2).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest

from ccdiff.paths import project_root

ADAPTER = textwrap.dedent('''
    import time
    ABI_VERSION = 4

    def describe():
        return "pyfake; options: mode=ok|hang|bad|ack-delay"

    class Controller:
        def __init__(self, mode, max_ack_delay_us):
            self.mode, self.cwnd = mode, 12000
            if mode == "ack-delay":       # shows what open() was given, as its window
                self.cwnd = max_ack_delay_us

        def step(self, ev):
            if ev.kind == 2 and self.mode == "hang":
                while True:               # a controller stuck in an endless loop
                    time.sleep(0.01)
            if ev.kind == 2 and self.mode == "bad":
                return ("12000",)          # not a ccd_snapshot
            return (self.cwnd, None, ev.bytes_in_flight, 1, None, None, None, None)

    def open(*, max_datagram_size, max_ack_delay_us, initial_rtt_us, options, clock_base_us, folder):
        mode = dict(o.split("=", 1) for o in options.split(",") if o).get("mode", "ok")
        if mode not in ("ok", "hang", "bad", "ack-delay"):
            raise ValueError(f"option mode: unknown value {mode!r}; accepted: mode=ok|hang|bad|ack-delay")
        return Controller(mode, max_ack_delay_us)
''')

TRACE = "\n".join(json.dumps(e) for e in (
    {"ccdiff_trace": 1, "max_datagram_size": 1200},
    {"t": 0, "ev": "sent", "pn": 0, "bytes": 1200},
    {"t": 10_000, "ev": "ack", "pns": [0], "ack_delay": 0}))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """CCDIFF_HOME with the real implementations plus `pyfake`, and a build folder with it built."""
    root = tmp_path_factory.mktemp("pyhome")
    impl = root / "home" / "implementations"
    impl.mkdir(parents=True)
    for name in ("include",):
        subprocess.run(["cp", "-r", str(project_root() / "implementations" / name), str(impl)], check=True)
    src = root / "pyfake-1.0"
    src.mkdir()
    (src / "adapter_src.py").write_text(ADAPTER)
    archive = root / "pyfake-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="pyfake-1.0")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    fake = impl / "pyfake"
    fake.mkdir()
    (fake / "stack.toml").write_text(textwrap.dedent(f'''
        name = "pyfake"
        language = "python"
        default_version = "1.0"
        options = ["mode=ok|hang|bad|ack-delay"]
        [[versions]]
        version = "1.0"
        url = "{archive.as_uri()}"
        sha256 = "{digest}"
        subdir = "pyfake-1.0"
    '''))
    (fake / "build.sh").write_text('set -eu\ncp "$1/adapter_src.py" "$2/ccdiff_adapter.py"\n')
    env = dict(os.environ, CCDIFF_HOME=str(root / "home"), CCDIFF_BUILD_DIR=str(root / "build"),
               PYTHONPATH=str(project_root()))
    (root / "home" / "trace.jsonl").write_text(TRACE + "\n")
    out = subprocess.run([sys.executable, "-m", "ccdiff", "build", "pyfake"], env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0 and "file://" in out.stderr:
        pytest.skip(f"ccdiff build does not fetch file:// URLs here: {out.stderr.strip()[-200:]}")
    assert out.returncode == 0, out.stderr
    return root, env


def ccdiff(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_python_stack_is_listed_built(home):
    _, env = home
    out = ccdiff(env, "stacks")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "pyfake" in line)
    assert "1.0" in row and "yes" in row


def test_hang_under_isolate_is_an_adapter_error_and_the_run_goes_on(home):
    root, env = home
    trace = str(root / "home" / "trace.jsonl")
    out = ccdiff(env, "replay", trace, "--stack", "pyfake:mode=hang", "--stack", "oracle",
                 "--isolate", "--timeout", "2", "--json", str(root / "hang.json"), timeout=90)
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads((root / "hang.json").read_text())
    findings = doc["findings"] if isinstance(doc, dict) else doc
    errors = [f for f in findings if f["invariant"] == "adapter-error"]
    assert [f["stack"] for f in errors] == ["pyfake:mode=hang"]
    assert "no reply within 2 s" in errors[0]["detail"]


def test_malformed_snapshot_is_an_adapter_error(home):
    root, env = home
    out = ccdiff(env, "replay", str(root / "home" / "trace.jsonl"), "--stack", "pyfake:mode=bad",
                 "--json", str(root / "bad.json"))
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads((root / "bad.json").read_text())
    findings = doc["findings"] if isinstance(doc, dict) else doc
    assert any(f["invariant"] == "adapter-error" and "8-tuple" in f["detail"] for f in findings)


@pytest.mark.parametrize("isolate", [False, True])
def test_the_trace_header_max_ack_delay_reaches_the_adapter(home, isolate):
    """ABI 4: ccd_open gets the peer's max_ack_delay from the trace header, in process and
    through `ccdiff serve` (--isolate): the fake reports it as its window, 700 bytes, which
    is below the 2-datagram minimum, so the finding names it."""
    root, env = home
    trace = root / "mad.jsonl"
    trace.write_text(TRACE.replace('"max_datagram_size": 1200}', '"max_datagram_size": 1200, "max_ack_delay": 700}')
                     + "\n")
    out = ccdiff(env, "replay", str(trace), "--stack", "pyfake:mode=ack-delay", "--json", str(root / "mad.json"),
                 *(["--isolate"] if isolate else []))
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads((root / "mad.json").read_text())
    findings = doc["findings"] if isinstance(doc, dict) else doc
    details = [f["detail"] for f in findings if f["invariant"] == "cwnd-below-minimum"]
    assert details and all("700" in d for d in details), findings


def test_option_refused_at_open_exits_2(home):
    root, env = home
    out = ccdiff(env, "replay", str(root / "home" / "trace.jsonl"), "--stack", "pyfake:mode=warp")
    assert out.returncode == 2
    assert "option mode: unknown value 'warp'" in out.stderr


def test_hang_in_conform_is_killed_at_the_case_timeout(home):
    """conform runs each case in a worker process: a Python controller stuck in a loop is
    killed after --timeout and reported as that case's error (exit 2), the others run."""
    root, env = home
    out = root / "conform-hang"
    proc = ccdiff(env, "conform", "--stack", "pyfake:mode=hang", "--scenario", str(project_root() / "scenarios" / "tail-loss.toml"), "--seeds", "1",
                  "--timeout", "3", "--jobs", "1", "--no-report", "--out", str(out), timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    by_stack = {case["stack"]: case for case in summary["cases"]}
    assert by_stack["pyfake:mode=hang"]["status"] == "error"
    assert by_stack["pyfake:mode=hang"]["reasons"] == ["timeout: case took longer than 3.0 s"]
    assert by_stack["oracle-reno"]["status"] == "pass"
    assert summary["totals"] == {"errors": 1, "failed": 0, "passed": 1, "runs": 2, "strict_new_findings": 0}
