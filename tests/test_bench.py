"""The benchmark entry points run end to end (smoke forms; no speed is asserted here:
speed targets live in bench/ and its results, never in timed tests)."""
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def run(script: str, *args, timeout=900):
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_run_all_quick_measures_every_part_in_one_table(tmp_path):
    done = run("run_all.py", "--quick", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(next(tmp_path.glob("bench-*-quick.json")).read_text())
    assert set(doc["parts"]) == {"oracle", "adapters", "fuzz", "ttf", "strict", "conform", "connection", "memory"}
    assert doc["machine"]["nproc"] >= 1 and doc["machine"]["cpu_model"]
    parts = doc["parts"]
    assert parts["oracle"]["alone"] > 0 and parts["oracle"]["checked"] > 0
    assert [r["stack"] for r in parts["adapters"]] == ["ngtcp2@1.25.0", "picoquic@1.1.53.0"]
    assert all(r["same_end_state"] for r in parts["adapters"])      # bare and adapter loops agree
    assert {(r["engine"], r["stack"]) for r in parts["fuzz"]} == {("afl", "quiche@0.26.0"),
                                                                  ("honggfuzz", "quiche@0.26.0")}
    assert all(r["execs_per_sec"] > 0 for r in parts["fuzz"])
    for row in parts["fuzz"]:            # the bounds beside it were measured, on the run's own queue
        assert row["floor_execs_per_sec"] > 0 and row["bound"]["inputs"] >= 5, row
        assert row["bound"]["controller"] > 0 and row["bound"]["plain_harness"] > 0, row
    for row in parts["ttf"]:             # each engine found the death spiral's root cause
        assert row["median_s"] is not None and row["invariants"] == ["future-recovery-start"], row
    # One real bug, one engine, one run: picoquic's (AFL++ reached it in 0.0-0.2 s in each of 5
    # runs of 60 s, bench/results/bench-2026-11-29-fuzz-strict.md), with a strict reproducer.
    (strict,) = parts["strict"]
    assert (strict["bug"], strict["engine"], strict["reached"]) == ("picoquic uncapped W_cubic after idle", "afl", 1), strict
    # Either face of the one bug comes first, as the campaign's timing has it (bench_fuzz.REAL_BUGS).
    assert strict["signatures"] and set(strict["signatures"]) <= {"ca-growth-bound--ack-congestion_avoidance",
                                                                   "idle-inflation--ack-congestion_avoidance"}, strict
    conform = parts["conform"]
    assert conform["runs"] == conform["stacks"] >= 2 and conform["totals"]["errors"] == 0
    assert conform["simulated_s"] > 0 and conform["main_max_rss_mb"] > 0 and conform["worker_max_rss_mb"] > 0
    (connection,) = parts["connection"]
    assert connection["stack"] == "aioquic" and connection["runs"] == 1 and connection["simulated_s"] > 0
    memory = parts["memory"]
    assert [r["command"] for r in memory] == ["validate", "replay oracle", "matrix (every built stack)"]
    assert all(r["exit"] in (0, 1) and r["peak_mb"] > 0 and r["events"] == 20_000 for r in memory), memory
    table = (tmp_path / Path(next(tmp_path.glob("bench-*-quick.json")).name).with_suffix(".md")).read_text()
    assert table.count("\n| ") == len(doc["table"]) + 1 and "load average" in table
    assert table in done.stdout


def test_hostile_bench_smoke_finds_nothing(tmp_path):
    done = run("bench_hostile.py", "--seconds", "3", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(next(tmp_path.glob("hostile-*.json")).read_text())
    assert doc["c_decoder"]["inputs"] > 0 and doc["c_decoder"]["crashes"] == []
    for name, stats in doc["python"].items():
        assert stats["inputs"] > 0 and stats["crashes"] == [], name


def test_hostile_classes_lose_nothing_and_exit_as_their_class_says(tmp_path):
    """Issue #32's table (bench_hostile.py --classes): every attempt of the hostile audit,
    run as a user would; the counts must be 0, and the judge itself must see a loss."""
    import hostile_classes
    rows = hostile_classes.run_all(hostile_classes.ROOT)     # this tree's ccdiff, not an installed one
    assert len({r["class"] for r in rows}) >= 27
    bad = [(r["attempt"], hostile_classes.failures(r), r["last_line"]) for r in rows if hostile_classes.failures(r)]
    assert not bad, bad
    table = hostile_classes.table(rows)
    assert f"| {len(rows)} | {len({r['class'] for r in rows})} | 0 | 0 | 0 | 0 |" in table
    probe = hostile_classes.Attempt("probe", "a file the attempt removes", ["validate", "{d}/t.jsonl"],
                                    exits=(0,), files={"t.jsonl": "x"}, keep=("gone",))
    assert hostile_classes.run_attempt(probe, tmp_path)["data_lost"] == ["gone"]
    unknown = hostile_classes.Attempt("probe", "an option this ccdiff lacks",
                                      ["validate", "{d}/t.jsonl", "--no-such-option"])
    assert hostile_classes.failures(hostile_classes.run_attempt(unknown, tmp_path)) == [
        "the option parser refused it (never ran)"]
    words = hostile_classes.Attempt("probe", "words, modes, XML", ["import", "{d}/t.jsonl", "-o", "{d}/o.jsonl"],
                                    files={"t.jsonl": "x", "j.xml": "<a>"}, says=("never printed",),
                                    never_says=("{d}/t.jsonl",), xml=("j.xml",), umask=0o022)
    why = hostile_classes.failures(hostile_classes.run_attempt(words, tmp_path))
    assert [w.split(" ")[0] for w in why] == ["does", "says", "not"], why


def test_hostile_campaign_reports_an_escaping_exception(monkeypatch):
    """A property that lets an exception escape is a crash, listed with its shrunk input."""
    import bench_hostile

    def check(value):
        if value > 1000:
            raise KeyError("not a documented error")

    monkeypatch.setattr(bench_hostile, "TARGETS", {"planted": (st.integers(), check)})
    stats = bench_hostile.python_campaign(0.5)["planted"]
    assert stats["inputs"] > 0 and stats["crashes"]
    assert stats["crashes"][0]["input"] == "1001" and "KeyError" in stats["crashes"][0]["error"]


def test_compare_commits_measures_two_trees_in_turns_and_cleans_up():
    """Smoke form of bench/compare_commits.py: HEAD against this working tree, one round."""
    before = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    done = run("compare_commits.py", "HEAD", "--rounds", "1", "--events", "3000", "--seeds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| measure (median of 1) | HEAD | working tree |")
    assert [r.split(" | ")[0] for r in rows[1:]] == [
        "| oracle alone (events/s)", "| oracle checked (events/s)", "| validate (events/s)",
        "| conform oracle, 2 scenarios x 1 seeds (CPU s)"]
    assert all(float(r.split(" | ")[-1].rstrip(" |")) > 0 for r in rows[1:])
    assert "round 1/1 old" in done.stderr and "round 1/1 new" in done.stderr
    after = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert after == before                           # the temporary worktree is gone


def test_linux_cross_check_smoke(tmp_path):
    """bench/linux_cross_check.py, one seed: every scenario has its row; on tail-loss Linux
    and the oracle agree at every ACK, on rtt-jitter they do not (HyStart off: Linux's
    recovery lasts until high_seq); 6.1 and 6.12 never differ (docs/linux-cross-check.md).
    --seeds 0 is exit 2 with one line."""
    from ccdiff.build import ensure_built
    ensure_built("linux@6.1")
    ensure_built("linux@6.12")
    out = tmp_path / "x.json"
    done = run("linux_cross_check.py", "--seeds", "1", "--stack", "linux@6.12:hystart=off", "--json", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    rows = doc["scenarios"]
    assert "tail-loss" in rows and "death-spiral" in rows
    assert rows["tail-loss"]["stacks"]["linux@6.12:hystart=off"]["agree"] == 1.0
    assert rows["rtt-jitter"]["stacks"]["linux@6.12:hystart=off"]["agree"] < 0.5
    assert all(r["version_diffs"] == 0 for r in rows.values())
    assert "| tail-loss |" in done.stdout
    bad = run("linux_cross_check.py", "--seeds", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
