"""`ccdiff conform`: the matrix, its outputs and its exit codes."""
from __future__ import annotations

import json
from pathlib import Path

from ccdiff.cli import main
from ccdiff.conform import SCHEMA, compare, run_conform, with_controls, write_outputs
from ccdiff.outdir import MANIFEST
from ccdiff.sim import load_scenario


def test_reno_controls_are_added():
    specs = with_controls(["oracle", "oracle:idle=last-send"])
    assert specs == ["oracle", "oracle:idle=last-send", "oracle-reno"]


def test_summary_is_byte_identical_across_runs(tmp_path):
    scenarios = [load_scenario("tail-loss"), load_scenario("death-spiral").with_params(bytes=300_000)]
    for name in ("a", "b"):
        summary = run_conform(["oracle", "oracle:idle=last-send"], scenarios, [0, 1], str(tmp_path / name), jobs=2)
        write_outputs(summary, str(tmp_path / name))
    for leaf in ("summary.json", "junit.xml"):
        assert (tmp_path / "a" / leaf).read_bytes() == (tmp_path / "b" / leaf).read_bytes()
    assert summary["totals"]["runs"] == 2 * 2 * 2
    junit = (tmp_path / "a" / "junit.xml").read_text()
    assert junit.count("<testcase") == 4


def test_exit_codes(tmp_path, capsys):
    assert main(["conform", "--stacks", "oracle", "--scenarios", "tail-loss", "--seeds", "1",
                 "--out", str(tmp_path / "ok"), "--jobs", "1"]) == 0
    assert main(["conform", "--stacks", "oracle", "--scenarios", "nope", "--seeds", "1",
                 "--out", str(tmp_path / "bad")]) == 2


def _short_death_spiral(tmp_path):
    text = (Path(__file__).resolve().parent.parent / "scenarios" / "death-spiral.toml").read_text()
    path = tmp_path / "short-death-spiral.toml"
    path.write_text(text.replace("bytes = 10_000_000", "bytes = 300_000")
                    .replace('name = "death-spiral"', 'name = "short-death-spiral"'))
    return str(path)


def test_baseline_flags_an_injected_regression(tmp_path):
    scenario = _short_death_spiral(tmp_path)
    common = ["conform", "--scenarios", scenario, "--seeds", "2", "--jobs", "2"]
    assert main(common + ["--stacks", "oracle", "--out", str(tmp_path / "base")]) == 0
    baseline = str(tmp_path / "base" / "summary.json")
    # the same stacks again: nothing regressed
    assert main(common + ["--stacks", "oracle", "--out", str(tmp_path / "same"), "--baseline", baseline]) == 0
    # the quiche-before-0.28 mutant under the oracle's name: every seed is a new failure
    assert main(common + ["--stacks", "oracle=oracle:idle=last-send", "--out", str(tmp_path / "mutant"),
                          "--baseline", baseline]) == 1
    summary = json.loads((tmp_path / "mutant" / "summary.json").read_text())
    assert [(r["kind"], r["stack"], r["seed"]) for r in summary["regressions"]] == [
        ("new-failure", "oracle", 0), ("new-failure", "oracle", 1)]


def test_compare_ignores_new_cells_and_improvements():
    base = {"schema": SCHEMA, "cases": [{"stack": "a", "scenario": "s", "seed": 0, "status": "fail"}],
            "cells": [{"stack": "a", "scenario": "s", "pass_rate": 0.0}]}
    now = {"cases": [{"stack": "a", "scenario": "s", "seed": 0, "status": "pass", "reasons": []},
                     {"stack": "b", "scenario": "s", "seed": 0, "status": "fail", "reasons": ["x"]}],
           "cells": [{"stack": "a", "scenario": "s", "pass_rate": 1.0},
                     {"stack": "b", "scenario": "s", "pass_rate": 0.0}]}
    assert compare(now, base) == []


def test_a_crashing_stack_costs_only_its_cases(tmp_path, monkeypatch):
    from .fault_adapters import install_faulty_stack
    repo = Path(__file__).resolve().parent.parent
    home = tmp_path / "home"
    install_faulty_stack(home)
    monkeypatch.setenv("CCDIFF_HOME", str(home))
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(home / "build"))
    scenario = load_scenario(str(repo / "scenarios" / "tail-loss.toml"))
    crashy = "faulty:fault=crash"
    summary = run_conform(["oracle", crashy], [scenario], [0, 1, 2], str(tmp_path / "out"), jobs=2)
    by_stack = {c["stack"]: c for c in summary["cells"]}
    assert by_stack["oracle"]["passed"] == 3
    assert by_stack[crashy]["errors"] == 3
    crash = [c for c in summary["cases"] if c["stack"] == crashy]
    assert all(c["reasons"][0].startswith("crash: worker died") for c in crash)
    scenario_file = repo / "scenarios" / "tail-loss.toml"    # not in CCDIFF_HOME's catalog: by path
    assert [c["replay"] for c in crash] == [f"ccdiff sim {scenario_file} --stack {crashy} --seed {seed}"
                                            for seed in (0, 1, 2)]
    assert "replay" not in by_stack["oracle"] and all("replay" not in c for c in summary["cases"]
                                                       if c["stack"] == "oracle")
    from ccdiff.conform import exit_code
    assert exit_code(summary) == 2


def test_a_hanging_stack_is_cut_off_and_the_run_goes_on(tmp_path, monkeypatch):
    """`ccdiff conform --timeout`: a stack that never answers costs its cases (errors with the
    command that reruns them), not the night."""
    import subprocess
    import sys
    from .fault_adapters import install_faulty_stack
    repo = Path(__file__).resolve().parent.parent
    home = tmp_path / "home"
    install_faulty_stack(home)
    env = dict(__import__("os").environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(home / "build"))
    hung = "faulty:fault=hang"
    result = subprocess.run([sys.executable, "-m", "ccdiff", "conform", "--stacks", f"oracle,{hung}",
                             "--scenarios", str(repo / "scenarios" / "tail-loss.toml"), "--seeds", "2",
                             "--timeout", "3", "--no-report", "--out", str(tmp_path / "out")],
                            cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    by_stack = {c["stack"]: c for c in summary["cells"]}
    assert by_stack["oracle"]["passed"] == 2 and by_stack[hung]["errors"] == 2
    assert all(c["reasons"] == ["timeout: case took longer than 3.0 s"] for c in summary["cases"]
               if c["stack"] == hung)
    assert "replay: ccdiff sim" in result.stdout and hung in result.stdout


def test_an_interrupted_run_resumes_without_losing_or_repeating_cases(tmp_path):
    """Crash safety: cases.jsonl keeps every finished case; a second run reuses them (a
    killed run is simulated by truncating the journal mid-line) and gives the same summary."""
    import json as _json
    repo = Path(__file__).resolve().parent.parent
    scenario = load_scenario(str(repo / "scenarios" / "tail-loss.toml"))
    out = tmp_path / "out"
    first = run_conform(["oracle"], [scenario], [0, 1, 2, 3], str(out), jobs=2)
    journal = out / "cases.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == 4
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])   # killed mid-write
    seen = []
    second = run_conform(["oracle"], [scenario], [0, 1, 2, 3], str(out), jobs=2, progress=seen.append)
    assert _json.dumps(second, sort_keys=True) == _json.dumps(first, sort_keys=True)
    assert len(seen) == 4                                   # progress covers kept cases too
    assert len(journal.read_text().splitlines()) == 4       # 2 kept + 2 rerun; the torn line is gone
    changed = scenario.with_params(bytes=300_000)            # another matrix: nothing is reused
    third = run_conform(["oracle"], [changed], [0, 1, 2, 3], str(out), jobs=2)
    assert len(journal.read_text().splitlines()) == 8
    assert third != first


def test_a_killed_run_resumes_to_the_same_summary(tmp_path):
    """A real SIGKILL of `ccdiff conform` mid-run: its workers do not outlive it, every case
    it finished is kept, and the next run completes the matrix to the byte-identical
    summary.json of an uninterrupted run, running only the missing cases."""
    import signal
    import subprocess
    import sys
    import time
    repo = Path(__file__).resolve().parent.parent
    args = [sys.executable, "-m", "ccdiff", "conform", "--stacks", "oracle", "--scenarios", "death-spiral",
            "--seeds", "10", "--jobs", "2", "--no-report", "--out"]
    whole = subprocess.run(args + [str(tmp_path / "whole")], cwd=repo, capture_output=True, timeout=600)
    assert whole.returncode in (0, 1), whole.stderr[-2000:]
    out = tmp_path / "killed"
    journal = out / "cases.jsonl"
    proc = subprocess.Popen(args + [str(out)], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 3):
        time.sleep(0.05)
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len(journal.read_text().splitlines())
    assert 3 <= kept < 20 and not (out / "summary.json").exists()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in workers):
        time.sleep(0.2)
    assert workers and not any(Path(f"/proc/{pid}").exists() for pid in workers), "workers outlived the run"
    again = subprocess.run(args + [str(out)], cwd=repo, capture_output=True, timeout=600)
    assert again.returncode == whole.returncode, again.stderr[-2000:]
    assert (out / "summary.json").read_bytes() == (tmp_path / "whole" / "summary.json").read_bytes()
    assert len(journal.read_text().splitlines()) == 20        # the kept cases were not run again


def test_ctrl_c_stops_the_run_with_no_traceback_and_keeps_what_it_finished(tmp_path):
    """Ctrl-C at a terminal signals the whole process group, workers included: the run says
    what it kept and exits 130, and no worker prints a traceback (issue #32)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "c"
    journal = out / "cases.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "conform", "--stacks", "oracle", "--scenarios",
                             "death-spiral", "--seeds", "40", "--jobs", "2", "--no-report", "--out", str(out)],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)              # as the terminal does: the parent and its workers
    text = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130, text[-2000:]
    assert "Traceback" not in text and "interrupted: finished cases are kept in" in text, text[-2000:]
    assert 2 <= len(journal.read_text().splitlines()) < 80 and not (out / "summary.json").exists()


def test_failing_stacks_get_an_html_report(tmp_path):
    """Issue 7: conform ends with a report of each failing stack, from its failing traces."""
    from ccdiff.conform import report_failures
    repo = Path(__file__).resolve().parent.parent
    scenario = load_scenario(str(repo / "scenarios" / "death-spiral.toml"))
    stacks = ["oracle", "mutant=oracle:idle=last-send"]
    summary = run_conform(stacks, [scenario], [0], str(tmp_path), jobs=2)
    folders = report_failures(summary, str(tmp_path), stacks)
    assert [f.name for f in folders] == ["mutant"]
    index = (folders[0] / "index.html").read_text()
    assert "future-recovery-start" in index
    assert list(folders[0].glob("findings/*/finding.md"))


def test_reports_built_in_parallel_are_the_files_of_reports_built_one_by_one(tmp_path):
    """conform builds each failing stack's report in its own process (one per core): the same
    files, byte for byte, and every one recorded in the folder's manifest as this run's."""
    import shutil
    from ccdiff.conform import report_failures
    from ccdiff.outdir import MANIFEST, OutputFolder
    repo = Path(__file__).resolve().parent.parent
    scenarios = [load_scenario(str(repo / "scenarios" / f"{name}.toml")) for name in ("death-spiral", "idle-restart")]
    stacks = ["oracle", "mutant=oracle:idle=last-send", "slip=oracle:idle=none", "reno=oracle-reno"]
    base = tmp_path / "base"
    summary = run_conform(stacks, scenarios, [0], str(base), jobs=2)
    trees = {}
    out = tmp_path / "out"             # one path for both: reports name their traces' paths
    for jobs in (1, 2):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out)
        with OutputFolder(out) as folder:
            for path in sorted((out / "traces").rglob("*.jsonl")):
                folder.adopt(path.relative_to(out))
            folders = report_failures(summary, folder, stacks, jobs=jobs)
            folder.finish()
        assert len(folders) >= 2, folders          # two stacks' reports, at once when jobs=2
        trees[jobs] = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        listed = set((out / MANIFEST).read_text().split())
        assert all(f'"{rel}"' in listed for rel in trees[jobs] if rel.startswith("report/")), jobs
    assert trees[1] == trees[2]


def test_a_dot_dot_label_is_refused_and_deletes_nothing(tmp_path, capsys):
    """A report name of '..' used to name OUT/report/.. = OUT, which report_failures removed."""
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text("")       # a folder ccdiff wrote, where the user keeps a file too
    keep = out / "precious.txt"
    keep.write_text("mine")
    scenario = _short_death_spiral(tmp_path)
    for label in ("..", ".", "", "a/b", "x\x07y"):
        assert main(["conform", "--stacks", f"{label}=oracle:idle=last-send", "--scenarios", scenario,
                     "--seeds", "1", "--jobs", "1", "--out", str(out)]) == 2
        assert keep.read_text() == "mine"
    assert "report name" in capsys.readouterr().err


def test_labels_that_share_a_folder_are_refused(tmp_path, capsys):
    """'x y' and 'x_y' sanitise to one folder: one stack's trace would overwrite the other's."""
    assert main(["conform", "--stacks", "x y=oracle,x_y=oracle:idle=none", "--scenarios", "tail-loss",
                 "--seeds", "1", "--jobs", "1", "--out", str(tmp_path / "o")]) == 2
    assert "share the folder" in capsys.readouterr().err
