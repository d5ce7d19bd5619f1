"""Issue #32, data loss: one case per class of the hostile audit of 3c176b9, each of which
lost or mixed data there.  The output layer (ccdiff/outdir.py) makes each class impossible:
no output overlaps an input, one run writes a folder at a time, ccdiff removes only what its
manifest says it wrote, and every file is written whole or not at all."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from ccdiff.cli import main
from ccdiff.outdir import MANIFEST, OutputFolder

ROOT = Path(__file__).resolve().parent.parent
DEATH_SPIRAL = ROOT / "examples" / "death-spiral.jsonl"
QLOG = ROOT / "tests" / "fixtures" / "qlog" / "aioquic-cubic-random-loss.qlog"


def _ccdiff(*argv, cwd=ROOT, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccdiff", *map(str, argv)], capture_output=True,
                          text=True, cwd=cwd, **kwargs)


def _short_scenario(folder: Path, name: str) -> Path:
    text = (ROOT / "scenarios" / "death-spiral.toml").read_text()
    path = folder / f"{name.replace(' ', '-')[:100]}.toml"
    path.write_text(text.replace("bytes = 10_000_000", "bytes = 200_000")
                    .replace('name = "death-spiral"', f'name = "{name}"'))
    return path


# -- 1. a report deletes its own input ------------------------------------------------------
def test_a_report_into_the_folder_that_holds_its_trace_is_refused_and_keeps_both(tmp_path, capsys):
    report = tmp_path / "R"
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "oracle:idle=last-send", "--report", str(report)]) == 1
    trace = report / "traces" / "death-spiral.jsonl"
    before = {p: p.read_bytes() for p in report.rglob("*") if p.is_file()}
    capsys.readouterr()
    for command in (["replay", str(trace)], ["matrix", str(trace)]):
        assert main(command + ["--stack", "oracle:idle=last-send", "--report", str(report)]) == 2
        assert "never writes into its inputs" in capsys.readouterr().err
    findings = report / "findings.json"          # `report --out` of a document inside the folder
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "oracle", "--json", str(tmp_path / "f.json")]) == 0
    (tmp_path / "f.json").rename(findings)
    assert main(["report", str(findings), "--out", str(report)]) == 2
    assert {p: p.read_bytes() for p in report.rglob("*") if p.is_file() and p != findings} == before


# -- 2. scenario names that collide ---------------------------------------------------------
def test_scenarios_that_would_share_a_folder_are_refused_before_any_run(tmp_path, capsys):
    one, two = _short_scenario(tmp_path, "a b"), _short_scenario(tmp_path, "a_b")
    out = tmp_path / "out"
    assert main(["conform", "--stack", "oracle", "--scenario", str(one), "--scenario", str(two),
                 "--seeds", "1", "--out", str(out)]) == 2
    assert "share the folder 'a_b'" in capsys.readouterr().err
    copy = tmp_path / "mine" / "death-spiral.toml"    # a custom file named like a catalog scenario
    copy.parent.mkdir()
    copy.write_text((ROOT / "scenarios" / "death-spiral.toml").read_text())
    assert main(["conform", "--stack", "oracle", "--scenario", "death-spiral", "--scenario", str(copy),
                 "--seeds", "1", "--out", str(out)]) == 2
    assert "'death-spiral' is given twice" in capsys.readouterr().err
    assert not (out / "summary.json").exists()


# -- 3. a closed stdout pipe ----------------------------------------------------------------
def test_a_reader_that_goes_away_costs_no_output_and_keeps_the_exit_code(tmp_path):
    findings, report = tmp_path / "f.json", tmp_path / "R"
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "replay", str(DEATH_SPIRAL), "--stack",
                             "oracle:idle=last-send", "--json", str(findings), "--report", str(report)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                 # `| head -c0`: the reader is gone before the first line
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err.decode()      # findings, as with a reader
    assert json.loads(findings.read_text())["findings"]
    assert (report / "summary.json").is_file() and b"Traceback" not in err


# -- 4. conform into a folder somebody else filled, or shares -------------------------------
def test_conform_refuses_a_foreign_folder_and_keeps_a_users_file_in_its_own(tmp_path, capsys):
    scenario = _short_scenario(tmp_path, "short")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("the user's")
    common = ["conform", "--scenario", str(scenario), "--seeds", "1", "--jobs", "1", "--out", str(out)]
    assert main(common + ["--stack", "x=oracle:idle=last-send"]) == 2
    assert "ccdiff did not write it" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == "the user's"
    (out / "summary.json").unlink()
    assert main(common + ["--stack", "x=oracle:idle=last-send"]) == 1
    mine = out / "report" / "x" / "notes.txt"          # a user's file inside ccdiff's own folder
    mine.write_text("keep me")
    assert main(common + ["--stack", "x=oracle"]) == 0      # x passes now: its report goes
    assert mine.read_text() == "keep me"
    assert not (out / "report" / "x" / "index.html").exists()


# -- 5. an output that is an input ----------------------------------------------------------
def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path):
    trace, qlog = tmp_path / "t.jsonl", tmp_path / "q.qlog"
    trace.write_bytes(DEATH_SPIRAL.read_bytes())
    qlog.write_bytes(QLOG.read_bytes())
    (tmp_path / "link.jsonl").hardlink_to(trace)
    for argv in (["replay", trace, "--json", trace], ["replay", trace, "--json", tmp_path / "link.jsonl"],
                 ["matrix", trace, "--json", tmp_path / "." / "t.jsonl"],
                 ["minimize", trace, "--stack", "oracle:idle=last-send", "--invariant", "future-recovery-start", "-o", trace],
                 ["import", qlog, "-o", qlog], ["import", qlog, "-o", tmp_path / "x.jsonl", "--json", qlog]):
        proc = _ccdiff(*argv)
        assert proc.returncode == 2 and "never writes into its inputs" in proc.stderr, (argv, proc.stderr)
    assert trace.read_bytes() == DEATH_SPIRAL.read_bytes() and qlog.read_bytes() == QLOG.read_bytes()


# -- 6. a bad --baseline ----------------------------------------------------------------------
def test_a_baseline_with_a_bad_value_is_refused_before_the_run(tmp_path, capsys):
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"schema": "ccdiff-conform/1", "cases": [],
                                    "cells": [{"stack": "oracle", "scenario": "x", "pass_rate": "high"}]}))
    out = tmp_path / "out"
    assert main(["conform", "--stack", "oracle", "--scenario", "death-spiral", "--seeds", "1",
                 "--baseline", str(baseline), "--out", str(out)]) == 2
    assert "baseline cells[0].pass_rate: expected int or float or null, found \"high\"" in capsys.readouterr().err
    assert not out.exists()


# -- 7. two runs into one folder ------------------------------------------------------------
def test_a_second_run_into_a_folder_being_written_is_refused(tmp_path):
    out = tmp_path / "out"
    with OutputFolder(out) as folder:        # the first run, still writing
        folder.write_text("summary.json", "{}\n")
        proc = _ccdiff("conform", "--stack", "oracle", "--scenario", "death-spiral", "--seeds", "1",
                       "--out", out)
        assert proc.returncode == 2 and "another ccdiff run is writing into this folder" in proc.stderr
        assert (out / "summary.json").read_text() == "{}\n"
    proc = _ccdiff("replay", DEATH_SPIRAL, "--stack", "oracle", "--report", out)
    assert proc.returncode == 0, proc.stderr        # the lock ends with its run


# -- 8. a full disk ---------------------------------------------------------------------------
def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # EFBIG instead of a kill, as ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_during_a_report_leaves_no_half_file_and_no_summary(tmp_path):
    report = tmp_path / "R"
    proc = _ccdiff("replay", DEATH_SPIRAL, "--stack", "quiche@0.26.0", "--report", report,
                   preexec_fn=_file_size_limit(20_000))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: cannot write {report}/") and "File too large" in proc.stderr
    assert "pathlib" not in proc.stderr
    assert not (report / "summary.json").exists()       # written last: a summary means a whole report
    assert all(p.stat().st_size for p in report.rglob("*") if p.is_file() and p.name != MANIFEST)


def test_files_are_written_with_the_umask_mode(tmp_path):
    report = tmp_path / "R"
    proc = _ccdiff("replay", DEATH_SPIRAL, "--stack", "oracle:idle=last-send", "--report", report,
                   "--json", tmp_path / "f.json", preexec_fn=lambda: os.umask(0o027))
    assert proc.returncode == 1, proc.stderr
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")
             if p.is_file()}
    assert modes["f.json"] == modes["R/summary.json"] == modes["R/index.html"] == 0o640
    assert set(modes.values()) == {0o640}, modes
    imported = tmp_path / "imported.jsonl"      # import -o had its own writer, at mkstemp's 0600
    proc = _ccdiff("import", QLOG, "-o", imported, preexec_fn=lambda: os.umask(0o027))
    assert proc.returncode == 0, proc.stderr
    assert imported.stat().st_mode & 0o777 == 0o640


# -- the smaller classes of the same audit --------------------------------------------------
def test_a_piped_trace_replays_as_its_file_does():
    with open(DEATH_SPIRAL, "rb") as stdin:
        piped = subprocess.run([sys.executable, "-m", "ccdiff", "replay", "/dev/stdin", "--stack",
                                "oracle:idle=last-send"], stdin=stdin, capture_output=True, text=True, cwd=ROOT)
    direct = _ccdiff("replay", DEATH_SPIRAL, "--stack", "oracle:idle=last-send")
    assert piped.returncode == direct.returncode == 1, piped.stderr
    assert piped.stdout.split("\n", 1)[1] == direct.stdout.split("\n", 1)[1]    # all but the name line


def test_a_timeout_without_isolation_is_refused(capsys):
    assert main(["replay", str(DEATH_SPIRAL), "--timeout", "5"]) == 2
    assert "--timeout limits a stack run in its own process: it needs --isolate" in capsys.readouterr().err


def test_a_trace_the_harness_cannot_write_is_its_error_not_the_stacks(tmp_path, capsys):
    scenario = _short_scenario(tmp_path, "x" * 300)       # OUT/traces/<name>/: ENAMETOOLONG
    assert main(["conform", "--stack", "oracle:idle=last-send", "--scenario", str(scenario), "--seeds", "1",
                 "--jobs", "1", "--no-report", "--out", str(tmp_path / "out")]) == 2
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    reasons = [r for case in summary["cases"] if case["stack"] == "oracle:idle=last-send" for r in case["reasons"]]
    assert reasons and reasons[0].startswith("harness: cannot write the trace traces/xxx") and \
        "File name too long" in reasons[0], reasons
    assert "crash" not in capsys.readouterr().out


def _children(pid: int) -> set:
    out = set()
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat_file.parent.name))
    return out


def test_a_killed_conform_leaves_no_worker_behind(tmp_path):
    """Each worker is in the middle of a long case (minutes) when the parent is SIGKILLed."""
    import time
    scenario = _short_scenario(tmp_path, "long")
    scenario.write_text(scenario.read_text().replace("bytes = 200_000", "bytes = 2_000_000_000")
                        .replace("deadline_us = 10_000_000", "deadline_us = 3_600_000_000"))
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "conform", "--stack", "oracle", "--scenario",
                             str(scenario), "--seeds", "2", "--jobs", "2", "--out", str(tmp_path / "out")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = _children(proc.pid)
    assert len(workers) >= 2
    time.sleep(2)                          # the cases are under way
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in workers) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_trace_that_means_two_things_is_refused_at_its_line(tmp_path, capsys):
    """A key given twice (json keeps the last), "ccdiff_trace": 1.0, a 5000-digit number
    (it was `decoder.py:353: ValueError`)."""
    header = DEATH_SPIRAL.read_text().splitlines()[0]
    cases = {
        '{"ccdiff_trace": 1, "ccdiff_trace": 2, "max_datagram_size": 1200}':
            'x.jsonl:1: not valid JSON for a trace (the key "ccdiff_trace" is given twice)',
        '{"ccdiff_trace": 1.0, "max_datagram_size": 1200}': "x.jsonl:1: unsupported trace version 1.0",
        header + '\n{"t": ' + "9" * 5000 + ', "ev": "sent", "pn": 0, "bytes": 1200}':
            "x.jsonl:2: not valid JSON for a trace (a number of more than 4300 digits)",
        header + '\n{"t": 0, "ev": "sent", "pn": 0, "pn": 1, "bytes": 1200}':
            'x.jsonl:2: not valid JSON for a trace (the key "pn" is given twice)',
    }
    for text, message in cases.items():
        (tmp_path / "x.jsonl").write_text(text + "\n")
        assert main(["validate", str(tmp_path / "x.jsonl")]) == 2
        assert message in capsys.readouterr().err


def test_a_qlog_of_an_unknown_version_or_a_nan_time_is_refused_at_its_line(tmp_path, capsys):
    head = '\x1e{"qlog_version": "%s", "traces": [{"vantage_point": {"type": "server"}}]}\n'
    cases = {head % "9.9" + '\x1e{"time": 1, "name": "transport:packet_sent", "data": {}}\n':
             'q.sqlog:1: qlog version "9.9": this import reads qlog 0.x',
             head % "0.3" + '\x1e{"time": NaN, "name": "transport:packet_sent", "data": {}}\n':
             'q.sqlog:2: event 1: "time" must be a finite number, got NaN'}
    for text, message in cases.items():
        (tmp_path / "q.sqlog").write_text(text)
        assert main(["import", str(tmp_path / "q.sqlog"), "-o", str(tmp_path / "t.jsonl")]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "t.jsonl").exists()


def test_a_stack_option_given_twice_is_refused(capsys):
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "oracle:idle=last-send,idle=none"]) == 2
    assert "option 'idle' given twice in stack spec" in capsys.readouterr().err


def test_a_folder_an_older_ccdiff_wrote_is_taken_over_and_a_users_file_kept(tmp_path, capsys):
    """Before the manifest: a report folder (summary.json says ccdiff_report) is replaced as
    the old code did, without refusing the upgrade; a file of the user's beside it stays."""
    report = tmp_path / "R"
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "oracle:idle=last-send", "--report", str(report)]) == 1
    (report / MANIFEST).unlink()                   # as an older ccdiff left it
    (report / "plots" / "stale.png").write_bytes(b"old")
    (report / "notes.txt").write_text("mine")
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "oracle", "--report", str(report)]) == 0
    assert not (report / "plots" / "stale.png").exists() and (report / "notes.txt").read_text() == "mine"
    assert (report / MANIFEST).is_file()
