"""`ccdiff conform --shard K/N` and `ccdiff merge` (issue 20, part 3): three shards merged are
the unsharded run, byte for byte; merge refuses, with exit 2 and one line, whatever is not
the N complete shards of one run, and never writes into its inputs."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from ccdiff.cli import main
from ccdiff.outdir import MANIFEST
from ccdiff.shard import in_shard, matrix_order, parse_shard

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from shard_merge import tree  # noqa: E402  (bench/shard_merge.py: the same check on the whole matrix)

# 3 seeds: the mutant's three failing death-spiral seeds fall one in each of 3 shards
CHEAP = ["--stacks", "oracle,oracle:idle=last-send", "--seeds", "3", "--jobs", "2"]


def run_in(monkeypatch, cwd: Path, *argv: str) -> int:
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)
    return main(list(argv))


def refused(capsys, *argv: str) -> str:
    """merge ARGV exits 2 with one line saying why; returns that line."""
    capsys.readouterr()
    assert main(["merge", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and "Traceback" not in "\n".join(err)
    return err[-1]


# -- the assignment ------------------------------------------------------------------
def test_round_robin_partitions_the_matrix_and_balances_each_scenario():
    order = matrix_order(10, 10, [0, 1])            # the default matrix with 2 seeds
    parts = [[i for i in range(len(order)) if in_shard(i, (k, 3))] for k in (1, 2, 3)]
    assert sorted(i for part in parts for i in part) == list(range(200))
    assert [len(p) for p in parts] == [67, 67, 66]
    for scenario in range(10):                      # every scenario's 20 cases over all 3 shards
        counts = [sum(order[i][0] == scenario for i in part) for part in parts]
        assert max(counts) - min(counts) <= 1, counts


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "x/y", "", "1/0", "-1/3", "1/3/3", "2/100000"])
def test_a_bad_shard_is_refused(text, tmp_path, capsys):
    with pytest.raises(Exception, match="--shard"):
        parse_shard(text)
    assert main(["conform", f"--shard={text}", "--out", str(tmp_path / "o")] + CHEAP) == 2
    assert "--shard" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists()


def test_a_shard_takes_no_baseline(tmp_path, capsys):
    assert main(["conform", "--shard", "1/2", "--baseline", str(tmp_path / "b.json"),
                 "--out", str(tmp_path / "o")] + CHEAP) == 2
    assert "ccdiff merge" in capsys.readouterr().err


# -- the must-show: every built stack, 2 seeds, 3 shards ------------------------------
# Four scenarios of the catalog (one with losses that fail quiche 0.26.0, an idle one, an
# app-limited one, a tail loss): the whole default matrix (11 scenarios) is
# bench/shard_merge.py's, about 10 minutes of one core, too long for every CI run.
SHARD_SCENARIOS = "death-spiral,idle-restart,app-limited,tail-loss"


def test_three_shards_merge_to_the_unsharded_run_byte_for_byte(tmp_path, monkeypatch):
    """summary.json, junit.xml, index.html, traces/ and report/ of `merge` are those of one
    unsharded `conform` with the same arguments and the same --out (the reports name traces
    by OUT as given, so both use `--out out`, from their own folders)."""
    args = ["conform", "--scenarios", SHARD_SCENARIOS, "--seeds", "2"]
    whole = run_in(monkeypatch, tmp_path / "whole", *args, "--out", "out")
    shards = [run_in(monkeypatch, tmp_path / "shards", *args, "--shard", f"{k}/3", "--out", str(k))
              for k in (1, 2, 3)]
    assert whole in (0, 1) and all(code in (0, 1) for code in shards)
    inputs = {k: tree(tmp_path / "shards" / str(k)) for k in (1, 2, 3)}
    merged = run_in(monkeypatch, tmp_path / "merged", "merge", "../shards/1", "../shards/2", "../shards/3",
                    "--out", "out")
    assert merged == whole
    one, joined = tmp_path / "whole" / "out", tmp_path / "merged" / "out"
    # cases.jsonl is conform's resume journal (completion order): merge writes none, and so
    # its manifest of what it wrote (ccdiff/outdir.py) does not name it
    assert tree(joined, skip={MANIFEST}) == tree(one, skip={"cases.jsonl", MANIFEST})
    listed = (one / MANIFEST).read_text().splitlines()
    assert (joined / MANIFEST).read_text().splitlines() == [n for n in listed if n != '"cases.jsonl"']
    for leaf in ("summary.json", "junit.xml", "index.html"):
        assert (joined / leaf).read_bytes() == (one / leaf).read_bytes()
    summary = json.loads((one / "summary.json").read_text())
    assert summary["totals"]["runs"] == len(summary["stacks"]) * len(summary["scenarios"]) * 2
    assert len(summary["stacks"]) >= 10 and len(summary["scenarios"]) == 4
    assert summary["totals"]["failed"] > 0          # something for the reports and traces to hold
    parts = [json.loads((tmp_path / "shards" / str(k) / "shard.json").read_text()) for k in (1, 2, 3)]
    assert sum(p["cases"] for p in parts) == summary["totals"]["runs"]
    assert max(p["cases"] for p in parts) - min(p["cases"] for p in parts) <= 1
    assert not (joined / "shard.json").exists()
    assert {k: tree(tmp_path / "shards" / str(k)) for k in (1, 2, 3)} == inputs      # inputs untouched


# -- refusals, on a cheap matrix -------------------------------------------------------
@pytest.fixture(scope="module")
def cheap(tmp_path_factory):
    """Three shards of oracle, its quiche-0.26.0-like mutant (failing: traces) and the Reno
    control on a short death spiral and tail loss, 3 seeds; a scenario file of our own."""
    root = tmp_path_factory.mktemp("cheap")
    text = (REPO / "scenarios" / "death-spiral.toml").read_text()
    scenario = root / "short.toml"
    scenario.write_text(text.replace("bytes = 10_000_000", "bytes = 300_000")
                        .replace('name = "death-spiral"', 'name = "short-death-spiral"'))
    args = ["conform", "--scenarios", f"{scenario},tail-loss"] + CHEAP
    for k in (1, 2, 3):
        assert main(args + ["--shard", f"{k}/3", "--out", str(root / str(k))]) == 1
    assert main(args + ["--out", str(root / "whole")]) == 1
    return {"root": root, "args": args, "scenario": scenario, "text": scenario.read_text()}


def copies(cheap, tmp_path, *names) -> list:
    out = []
    for name in names:
        shutil.copytree(cheap["root"] / name, tmp_path / name)
        out.append(tmp_path / name)
    return out


def test_the_cheap_shards_merge_to_the_whole(cheap, tmp_path):
    s = [str(cheap["root"] / k) for k in "123"]
    assert main(["merge", *s, "--out", str(tmp_path / "m")]) == 1          # conform's exit code
    whole = json.loads((cheap["root"] / "whole" / "summary.json").read_text())
    assert json.loads((tmp_path / "m" / "summary.json").read_text()) == whole
    assert whole["totals"]["failed"] > 0 and any(c.get("trace") for c in whole["cases"])
    assert main(["merge", *reversed(s), "--out", str(tmp_path / "m2"), "--no-report"]) == 1   # any order
    assert (tmp_path / "m2" / "summary.json").read_bytes() == (tmp_path / "m" / "summary.json").read_bytes()


def test_shards_of_different_arguments_are_refused(cheap, tmp_path, capsys):
    other = tmp_path / "3"
    assert main(cheap["args"][:-4] + ["--seeds", "4", "--jobs", "2", "--shard", "3/3", "--out", str(other)]) == 1
    line = refused(capsys, str(cheap["root"] / "1"), str(cheap["root"] / "2"), str(other),
                   "--out", str(tmp_path / "m"))
    assert "different arguments" in line and "seeds" in line
    assert not (tmp_path / "m").exists()


def test_shards_of_different_scenario_files_are_refused(cheap, tmp_path, capsys):
    """Same name, same results even (a comment), other bytes: not the same run."""
    try:
        cheap["scenario"].write_text("# edited between two runners' checkouts\n" + cheap["text"])
        assert main(cheap["args"] + ["--shard", "3/3", "--out", str(tmp_path / "3")]) == 1
    finally:
        cheap["scenario"].write_text(cheap["text"])
    line = refused(capsys, str(cheap["root"] / "1"), str(cheap["root"] / "2"), str(tmp_path / "3"),
                   "--out", str(tmp_path / "m"))
    assert "different scenario files" in line and "short-death-spiral" in line


def test_shards_of_different_stack_builds_are_refused(tmp_path, monkeypatch, capsys):
    """A native stack rebuilt from other sources between two shards (build-info.json differs
    in more than the build's duration)."""
    from .fault_adapters import install_faulty_stack
    home = tmp_path / "home"
    install_faulty_stack(home)
    monkeypatch.setenv("CCDIFF_HOME", str(home))
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(home / "build"))
    info = home / "build" / "faulty" / "1.0" / "build-info.json"
    args = ["conform", "--stacks", "faulty:fault=none", "--scenarios", str(REPO / "scenarios" / "tail-loss.toml"),
            "--seeds", "1", "--jobs", "1", "--no-report"]
    for k, (sha, seconds) in enumerate([("one", 1.0), ("one", 9.0), ("two", 1.0)], 1):
        info.write_text(json.dumps({"stack": "faulty", "version": "1.0", "sha256": sha, "seconds": seconds}))
        assert main(args + ["--shard", f"{k}/2" if k < 3 else "2/2", "--out", str(tmp_path / str(k))]) in (0, 1)
    # a build's duration is not its identity: shards 1 and 2 (built in 1 s and 9 s) merge
    assert main(["merge", str(tmp_path / "1"), str(tmp_path / "2"), "--out", str(tmp_path / "ok")]) in (0, 1)
    line = refused(capsys, str(tmp_path / "1"), str(tmp_path / "3"), "--out", str(tmp_path / "m"))
    assert "different stack builds" in line and "faulty" in line


def test_a_missing_shard_is_refused(cheap, tmp_path, capsys):
    line = refused(capsys, str(cheap["root"] / "1"), str(cheap["root"] / "3"), "--out", str(tmp_path / "m"))
    assert "shard 2/3 missing" in line


def test_a_duplicated_shard_is_refused(cheap, tmp_path, capsys):
    (again,) = copies(cheap, tmp_path, "2")
    line = refused(capsys, *(str(cheap["root"] / k) for k in "123"), str(again), "--out", str(tmp_path / "m"))
    assert "shard 2/3 given twice" in line
    line = refused(capsys, *(str(cheap["root"] / k) for k in "1223"), "--out", str(tmp_path / "m"))
    assert "given twice" in line


def test_a_half_written_shard_is_refused(cheap, tmp_path, capsys):
    """No shard.json: the run did not finish.  A run into a finished shard folder removes it
    before it starts (here: a resumed run of the same shard, stopped before its end)."""
    from ccdiff.conform import run_conform
    from ccdiff.sim import load_scenario
    one, two, three = copies(cheap, tmp_path, "1", "2", "3")
    seen = []
    run_conform(["oracle", "oracle:idle=last-send", "oracle-reno"],
                [load_scenario(str(cheap["scenario"])), load_scenario("tail-loss")], [0, 1, 2], str(two), jobs=1,
                shard=(2, 3), progress=lambda doc: seen.append((two / "shard.json").exists()))
    assert seen and not any(seen)                     # resumed from the journal, marker already gone
    line = refused(capsys, str(one), str(two), str(three), "--out", str(tmp_path / "m"))
    assert "half-written shard" in line and str(two) in line
    # the same command again completes it (every case from the journal) and the merge goes through
    assert main(cheap["args"] + ["--shard", "2/3", "--out", str(two)]) == 1
    assert (two / "shard.json").read_bytes() == (cheap["root"] / "2" / "shard.json").read_bytes()
    assert main(["merge", str(one), str(two), str(three), "--out", str(tmp_path / "m")]) == 1


def test_a_shard_changed_after_it_finished_is_refused(cheap, tmp_path, capsys):
    one, two, three = copies(cheap, tmp_path, "1", "2", "3")
    with (two / "summary.json").open("a") as fh:
        fh.write(" ")
    assert "summary.json is missing or not the one" in refused(capsys, str(one), str(two), str(three),
                                                                "--out", str(tmp_path / "m"))
    marker = json.loads((one / "shard.json").read_text())
    trace = one / sorted(marker["traces"])[0]
    trace.write_text(trace.read_text()[:-10])
    assert "not the trace shard.json recorded" in refused(capsys, str(one), str(cheap["root"] / "2"), str(three),
                                                           "--out", str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_a_relabelled_shard_is_refused(cheap, tmp_path, capsys):
    """shard.json of 1 says 3 and 3's says 1: the cases are not round-robin's for those K."""
    one, two, three = copies(cheap, tmp_path, "1", "2", "3")
    for folder, k in ((one, 3), (three, 1)):
        doc = json.loads((folder / "shard.json").read_text())
        doc["shard"]["index"] = k
        (folder / "shard.json").write_text(json.dumps(doc))
    assert "are not those of shard" in refused(capsys, str(one), str(two), str(three), "--out", str(tmp_path / "m"))


def test_merge_never_writes_into_its_inputs(cheap, tmp_path, capsys):
    one, two, three = copies(cheap, tmp_path, "1", "2", "3")
    before = {p: tree(p) for p in (one, two, three)}
    for out in (two, two / "merged", tmp_path, tmp_path / "2" / ".." / "3"):
        line = refused(capsys, str(one), str(two), str(three), "--out", str(out))
        assert "never writes into its inputs" in line
    (tmp_path / "link").symlink_to(three)
    assert "never writes into its inputs" in refused(capsys, str(one), str(two), str(three),
                                                     "--out", str(tmp_path / "link"))
    assert {p: tree(p) for p in (one, two, three)} == before
    assert not (two / "merged").exists()


def test_hostile_shard_folders_are_refused(cheap, tmp_path, capsys):
    one, two, three = copies(cheap, tmp_path, "1", "2", "3")
    others = [str(two), str(three), "--out", str(tmp_path / "m")]
    assert "not a folder" in refused(capsys, str(tmp_path / "nope"), *others)
    (tmp_path / "file").write_text("x")
    assert "not a folder" in refused(capsys, str(tmp_path / "file"), *others)
    (tmp_path / "empty").mkdir()
    assert "not a shard folder" in refused(capsys, str(tmp_path / "empty"), *others)
    marker = one / "shard.json"
    good = marker.read_text()
    for bad in ("[]", "{}", "not json", json.dumps(dict(json.loads(good), shard={"index": "1", "count": 3}))):
        marker.write_text(bad)
        assert refused(capsys, str(one), *others)
    marker.write_text(good)
    # a trace path that leaves the folder, with hashes forged to match
    doc, summary = json.loads(good), json.loads((one / "summary.json").read_text())
    rel = sorted(doc["traces"])[0]
    evil = "traces/../../../../etc/x/seed-0.jsonl"
    for case in summary["cases"]:
        if case.get("trace") == rel:
            case["trace"] = evil
    (one / "summary.json").write_text(json.dumps(summary))
    doc["summary_sha256"] = hashlib.sha256((one / "summary.json").read_bytes()).hexdigest()
    doc["traces"] = {evil if k == rel else k: v for k, v in doc["traces"].items()}
    marker.write_text(json.dumps(doc))
    assert "refusing trace path" in refused(capsys, str(one), *others)
    # a trace that is a symlink (to the very same bytes): merge would copy whatever it points at
    shutil.rmtree(one)
    (one,) = copies(cheap, tmp_path, "1")
    trace = one / rel
    trace.rename(tmp_path / "elsewhere.jsonl")
    trace.symlink_to(tmp_path / "elsewhere.jsonl")
    assert "not the trace shard.json recorded" in refused(capsys, str(one), *others)
    assert not (tmp_path / "m").exists()


def test_a_merged_folder_that_was_a_shard_is_no_longer_one(cheap, tmp_path, monkeypatch):
    """--out of a shard from another run: merge overwrites it as conform would, and its stale
    shard.json goes, so it can never pass for a shard."""
    (old,) = copies(cheap, tmp_path, "1")
    assert main(["merge", *(str(cheap["root"] / k) for k in "123"), "--out", str(old), "--no-report"]) == 1
    assert not (old / "shard.json").exists()
    assert (old / "summary.json").read_bytes() == (cheap["root"] / "whole" / "summary.json").read_bytes()


# -- compose and the nightly example -----------------------------------------------------
def test_compose_conformance_takes_the_shard():
    import yaml
    service = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["conformance"]
    assert service["environment"]["CCDIFF_SHARD"] == "${CCDIFF_SHARD:-}"
    script = (REPO / "docker" / "conformance.sh").read_text()
    assert '--shard "$CCDIFF_SHARD"' in script


def test_the_nightly_example_shards_and_merges():
    import yaml
    flow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly-conform-sharded.yml").read_text())
    jobs = flow["jobs"]
    shards = jobs["shard"]["strategy"]["matrix"]["shard"]
    count = len(shards)
    assert shards == list(range(1, count + 1)) and count >= 2
    runs = "\n".join(step.get("run", "") for step in jobs["shard"]["steps"])
    assert f"--shard ${{{{ matrix.shard }}}}/{count}" in runs
    assert jobs["merge"]["needs"] == "shard" or "shard" in jobs["merge"]["needs"]
    merge = "\n".join(step.get("run", "") for step in jobs["merge"]["steps"])
    assert "ccdiff merge" in merge


def test_a_served_stack_is_identified_by_its_servers_build(monkeypatch):
    """Shards run against containers (compose) record what each adapter server built, as its
    `hello` reports it: two runners whose images differ cannot be merged."""
    from ccdiff import remote
    from ccdiff.serve import Session
    from ccdiff.shard import build_identity, build_info_identity
    from ccdiff.stacks import load_recipes, resolve
    reply = Session(None).handle({"op": "hello"})
    recipes = load_recipes()
    built = [(stack, v) for stack, vs in reply["versions"].items() for v in vs]
    assert built, "no stack is built here"
    assert reply["builds"] == {s: {v: build_info_identity(recipes[s], v) for v in vs}
                               for s, vs in reply["versions"].items()}
    stack, version = built[0]
    target = resolve(f"{stack}@{version}", recipes)
    local = build_identity(target)
    assert len(local) == 64
    monkeypatch.setenv("CCDIFF_REMOTE_" + stack.upper().replace("-", "_"), "127.0.0.1:9")   # ccdiff/remote.py
    monkeypatch.setitem(remote._HELLO, ("127.0.0.1", 9), reply)       # no server: hello's cached answer
    assert build_identity(target) == f"served:{local}"
    monkeypatch.setitem(remote._HELLO, ("127.0.0.1", 9), dict(reply, builds={}))   # an older server
    assert build_identity(target) == "served:unrecorded"
