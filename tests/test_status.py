"""A status on every finding (ccdiff/status.py), decided from the profiles' [[known]] data, and
one deviation-or-violation rule for replay and the closed loop (profiles.judge)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccdiff.cli import main
from ccdiff.errors import SetupError
from ccdiff.invariants import Finding
from ccdiff.profiles import Profile, judge, load_profile
from ccdiff.replay import replay
from ccdiff.stacks import resolve
from ccdiff.trace import load_trace
from ccdiff.status import DEVIATION, KNOWN, LENIENT, NEW, UNCHECKED, FixReplay, affects, status_of

ROOT = Path(__file__).resolve().parent.parent
QUICHE_PROFILE = load_profile(resolve("quiche@0.26.0").recipe)
QUICHE_KNOWN = QUICHE_PROFILE.known


@pytest.mark.parametrize("version, text", [
    ("0.26.0", "fixed upstream in 0.26.1"),     # the death spiral: fixed in the next release
    ("0.26.1", NEW),                            # not covered any more: a finding there is new
    ("0.30.0", NEW),
])
def test_the_death_spiral_is_fixed_upstream_in_0_26_1_only_for_older_releases(version, text):
    assert status_of("violation", "future-recovery-start", version, QUICHE_KNOWN, "strict", "",
                     QUICHE_PROFILE.upstream).text == text


def test_a_fix_covers_a_finding_only_if_the_fixed_release_no_longer_shows_it():
    """A version bound is a claim; the replay on the fixed release is the evidence.  quiche
    0.26.0's recovery start pushed into the future by a timer loss and an idle restart
    (fuzz/reproducers/timer-loss-idle-restart.jsonl) was filed "fixed upstream in 0.26.1" by
    the death spiral's bound, yet 0.26.1 and 0.30.0 show it too: a bug report, not a fixed one.
    The death spiral itself stays fixed: 0.26.1 replayed does not show it."""
    def status(replayed):
        return status_of("violation", "future-recovery-start", "0.26.0", QUICHE_KNOWN, "strict", "",
                         QUICHE_PROFILE.upstream, stack="quiche", fix_replays={"0.26.1": replayed})
    still = status(FixReplay("quiche@0.30.0", frozenset({"future-recovery-start"})))
    assert still.kind == "new" and still.text == NEW + " — quiche@0.30.0 still shows it: not what " \
        "cubic-idle-shift-death-spiral fixed"
    gone = status(FixReplay("quiche@0.26.1", frozenset({"trajectory-divergence"})))
    assert (gone.kind, gone.text) == ("fixed", "fixed upstream in 0.26.1")
    unbuilt = status(FixReplay(""))
    assert unbuilt.kind == "fixed" and "by version only" in unbuilt.text and "ccdiff build quiche@0.26.1" in unbuilt.text

    from ccdiff.build import ensure_built
    ensure_built("quiche@0.30.0")
    for name, kind in (("fuzz/reproducers/timer-loss-idle-restart.jsonl", "new"),
                       ("examples/death-spiral.jsonl", "fixed")):
        result = replay(load_trace(str(ROOT / name)), ["quiche@0.26.0"])
        run = result.runs["quiche@0.26.0"]
        assert run.fix_replays is None, name           # made on the first status that needs it
        spiral = next(f for f in result.findings if f.invariant == "future-recovery-start")
        from ccdiff.replay import upstream_status
        assert upstream_status(run, spiral, "strict").kind == kind, name
        assert set(run.fix_replays) == {"0.26.1"} and run.fix_replays["0.26.1"].label, name


def test_new_needs_a_record_of_the_upstream_check():
    """"new" claims nobody upstream knows: only a profile that records when and against what
    its tracker was read may say it; otherwise the finding is a draft to check first."""
    assert QUICHE_PROFILE.upstream["checked"] == "2026-11-24"
    unchecked = status_of("violation", "idle-inflation", "0.30.0", QUICHE_KNOWN, "strict")
    assert unchecked.text == UNCHECKED and unchecked.kind == "unchecked" and unchecked.is_bug_report
    assert "not checked" in UNCHECKED
    for name in ("quiche", "ngtcp2", "aioquic", "s2n-quic"):
        assert load_profile(resolve(name).recipe).upstream, f"{name}: its tracker check is recorded"


def test_a_malformed_upstream_record_is_a_setup_error(tmp_path):
    folder = tmp_path / "stack"
    folder.mkdir()
    (folder / "profile.toml").write_text('[upstream]\nchecked = "last week"\nagainst = "x"\n')

    class Recipe:
        name = "stack"
    Recipe.folder = folder
    with pytest.raises(SetupError, match="checked = "):
        load_profile(Recipe)


def test_quiche_persistent_congestion_is_known_upstream_in_every_release():
    for version in ("0.26.0", "0.30.0"):
        status = status_of("violation", "persistent-congestion-ignored", version, QUICHE_KNOWN, "strict")
        assert (status.text, status.url) == (KNOWN, "https://github.com/cloudflare/quiche/issues/2680")
        assert not status.is_bug_report


def test_deviation_and_lenient_come_first_and_are_never_bug_reports():
    assert status_of("deviation", "future-recovery-start", "0.26.0", QUICHE_KNOWN, "strict").text == DEVIATION
    lenient = status_of("violation", "idle-inflation", "0.30.0", QUICHE_KNOWN, "lenient")
    assert lenient.text == LENIENT and not lenient.is_bug_report
    assert status_of("violation", "idle-inflation", "0.30.0", QUICHE_KNOWN, "strict").is_bug_report


@pytest.mark.parametrize("bound, version, covered", [
    ("<0.26.1", "0.26.0", True), ("<0.26.1", "0.26.1", False), ("<=1.13", "1.13.0", True),
    ("all", "local-3a8c", True), ("<0.26.1", "local-3a8c", False), (">=1.13.0", "1.25.0", True),
])
def test_version_bounds(bound, version, covered):
    assert affects(bound, version) is covered


def test_a_known_entry_naming_an_unknown_invariant_is_a_setup_error(tmp_path):
    folder = tmp_path / "stack"
    folder.mkdir()
    (folder / "profile.toml").write_text('[[known]]\nid = "x"\nurl = "u"\ncondition = "c"\ninvariants = ["nope"]\n')

    class Recipe:
        name = "stack"
    Recipe.folder = folder
    with pytest.raises(SetupError, match=r"profile.toml: \[\[known\]\] 'x' names unknown invariant 'nope'"):
        load_profile(Recipe)


def finding(invariant, index, status="violation"):
    return Finding("s", invariant, index, index * 10, "detail", status=status)


def test_a_divergence_follows_only_findings_that_came_before_it():
    """The quiche report once said a divergence at event 40 'follows' stuck-at-minimum,
    first seen at event 46: causal order only."""
    profile = Profile(deviations=[{"id": "d", "tolerates": ["trajectory-divergence"]}])
    early = [finding("trajectory-divergence", 40), finding("stuck-at-minimum", 46)]
    judge(early, profile)
    assert early[0].status == "deviation" and "follows" not in early[0].detail
    late = [finding("future-recovery-start", 35), finding("trajectory-divergence", 40),
            finding("stuck-at-minimum", 46)]
    judge(late, profile)
    assert late[1].status == "violation" and late[1].detail.endswith("(follows future-recovery-start)")


def test_a_divergence_inside_the_round_trip_an_idle_inflation_measures_follows_it():
    """idle-inflation is flagged at the last ACK of the round trip after the idle, but the
    window began to inflate at that round trip's first ACK: a divergence in between is the
    inflation's footprint (split ACKs once moved ngtcp2's divergence on examples/idle-restart
    there, and the wholesale waiver hid it)."""
    profile = Profile(deviations=[{"id": "d", "tolerates": ["trajectory-divergence"]}])
    inflation = finding("idle-inflation", 3215)
    inflation.onset_index = 3170
    findings = [finding("trajectory-divergence", 3178), inflation]
    judge(findings, profile)
    assert findings[0].status == "violation" and findings[0].detail.endswith("(follows idle-inflation)")
    before_onset = [finding("trajectory-divergence", 3160), finding("idle-inflation", 3215)]
    before_onset[1].onset_index = 3170
    judge(before_onset, profile)
    assert before_onset[0].status == "deviation"


def test_the_checker_dates_an_idle_inflation_from_the_first_ack_after_the_idle():
    trace = load_trace(str(ROOT / "examples" / "idle-restart.jsonl"))
    (found,) = [f for f in replay(trace, ["ngtcp2@1.25.0"]).findings if f.invariant == "idle-inflation"]
    first_ack_after_idle = next(i for i, ev in enumerate(trace.events)
                                if ev.t >= 10_000_000 and type(ev).__name__ == "Ack")
    assert found.onset_index == first_ack_after_idle < found.event_index


def test_the_report_of_the_death_spiral_carries_its_status_and_no_bug_report_link(tmp_path):
    out, doc = tmp_path / "r", tmp_path / "f.json"
    assert main(["replay", str(ROOT / "examples" / "death-spiral.jsonl"), "--stack", "quiche@0.26.0",
                 "--stack", "picoquic", "--json", str(doc), "--report", str(out)]) == 1
    findings = json.loads(doc.read_text())["findings"]
    spiral = next(f for f in findings if f["invariant"] == "future-recovery-start")
    assert spiral["upstream_status"] == "fixed upstream in 0.26.1"
    page = next(out.glob("findings/*quiche-0.26.0--future-recovery-start*/index.html")).read_text()
    assert "Status: fixed upstream in 0.26.1" in page and "(bug report)" not in page
    # picoquic's documented deviations: no bug-report link anywhere, the status says why.
    for path in out.glob("findings/*picoquic*/*"):
        if path.suffix in (".html", ".md"):
            text = path.read_text()
            assert "bug report)" not in text, path
    deviations = [f for f in findings if f["stack"].startswith("picoquic")]
    assert deviations and all(f["upstream_status"] == DEVIATION for f in deviations if f["status"] == "deviation")
    index = (out / "index.html").read_text()
    assert "(bug report)" not in index


def test_a_closed_loop_finding_names_the_sim_command_that_reruns_it(tmp_path):
    """Conform and sim traces are named 'SCENARIO seed=N': the report gives the closed-loop
    rerun (with the oracle and the Reno control beside the stack) next to the replay."""
    trace = tmp_path / "ds.jsonl"
    assert main(["sim", "death-spiral", "--seed", "0", "--stack", "quiche@0.26.0", "--no-controls",
                 "--trace", str(trace)]) == 1
    assert main(["replay", str(trace), "--stack", "quiche@0.26.0", "--report", str(tmp_path / "r")]) == 1
    md = next((tmp_path / "r").glob("findings/*future-recovery-start*/finding.md")).read_text()
    assert "ccdiff sim death-spiral --seed 0 --stack quiche@0.26.0" in md
    page = next((tmp_path / "r").glob("findings/*future-recovery-start*/index.html")).read_text()
    assert "ccdiff sim death-spiral --seed 0 --stack quiche@0.26.0" in page


def test_a_divergence_that_follows_an_unknown_violation_is_part_of_its_report_not_a_second_one():
    detail = "cwnd 2400 vs oracle 3892 ... (follows growth-in-recovery, idle-inflation)"
    status = status_of("violation", "trajectory-divergence", "0.30.0", QUICHE_KNOWN, "strict", detail,
                       QUICHE_PROFILE.upstream)
    assert status.kind == "consequence" and not status.is_bug_report
    assert "growth-in-recovery, idle-inflation" in status.text
    # One that follows a fixed bug takes that bug's status; one that follows nothing is new.
    fixed = status_of("violation", "trajectory-divergence", "0.26.0", QUICHE_KNOWN, "strict",
                      "x (follows future-recovery-start)", QUICHE_PROFILE.upstream)
    assert fixed.kind == "fixed"
    alone = status_of("violation", "trajectory-divergence", "0.30.0", QUICHE_KNOWN, "strict", "x",
                      QUICHE_PROFILE.upstream)
    assert alone.kind == "new"


# --- local builds (issue 30 item 9) --------------------------------------------------------------

def test_a_local_build_is_never_new():
    """A finding on a `build --source` build is not upstream's until its release shows it too:
    "local build of ..." in place of new / not checked; known, fixed, deviation, lenient and
    consequence keep their meaning."""
    from ccdiff.status import LOCAL
    checked = {"checked": "2026-01-01", "against": "master"}
    for version in ("git-0123456789", "git-0123456789-dirty-0123456789ab", "local-0123456789ab"):
        status = status_of("violation", "idle-inflation", version, QUICHE_KNOWN, "strict", "", checked,
                           stack="quiche", release="0.30.0")
        assert status.kind == "local" and not status.is_bug_report
        assert status.text == LOCAL.format(stack="quiche", version=version, release="0.30.0")
        assert status.text == (f"local build of quiche@{version} — compare with its release "
                               "(`--against quiche@0.30.0`) before filing")
        assert status_of("deviation", "idle-inflation", version, QUICHE_KNOWN, "strict",
                         stack="quiche").text == DEVIATION
        assert status_of("violation", "idle-inflation", version, QUICHE_KNOWN, "lenient",
                         stack="quiche").text == LENIENT
    assert status_of("violation", "idle-inflation", "0.30.0", QUICHE_KNOWN, "strict", "", checked,
                     stack="quiche", release="0.30.0").text == NEW
    everywhere = [{"id": "k", "url": "u", "invariants": ["idle-inflation"], "condition": "c", "affects": "all"}]
    assert status_of("violation", "idle-inflation", "git-0123456789", everywhere, "strict", "", checked,
                     stack="quiche").kind == "known"


@pytest.fixture
def checkout_builds(tmp_path, monkeypatch):
    """A build folder with the pinned ngtcp2@1.25.0 and two checkout builds of the same
    library: git-0123456789 (its source folder exists) and local-0123456789ab (built from a
    temp folder deleted since).  Copies of the pinned build, so nothing is compiled."""
    import shutil
    pinned = resolve("ngtcp2@1.25.0").recipe.build_folder("1.25.0")
    assert (pinned / "libccdiff_adapter.so").is_file(), "run: ccdiff build ngtcp2@1.25.0"
    build = tmp_path / "build"
    source = tmp_path / "checkout"
    source.mkdir()
    info = json.loads((pinned / "build-info.json").read_text())
    for version, origin in (("1.25.0", None), ("git-0123456789", source), ("local-0123456789ab", tmp_path / "gone")):
        folder = build / "ngtcp2" / version
        folder.mkdir(parents=True)
        shutil.copy(pinned / "libccdiff_adapter.so", folder)
        own = dict(info, version=version)
        if origin is not None:
            own = {k: v for k, v in own.items() if k not in ("url", "sha256")}
            own["source"] = str(origin)
        (folder / "build-info.json").write_text(json.dumps(own))
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(build))
    return build


def test_findings_on_a_local_build_say_so_in_json_report_and_terminal(checkout_builds, tmp_path, capsys):
    """Same trace, same library: ngtcp2@1.25.0's idle-inflation is "new"; the checkout
    build's is "local build of ..." in --json, in the report (no bug-report link) and on
    the terminal."""
    from ccdiff.status import LOCAL
    doc, out = tmp_path / "f.json", tmp_path / "r"
    assert main(["replay", str(ROOT / "examples" / "idle-restart.jsonl"), "--stack", "ngtcp2@1.25.0",
                 "--stack", "ngtcp2@git-0123456789", "--json", str(doc), "--report", str(out)]) == 1
    findings = json.loads(doc.read_text())["findings"]
    status = {f["stack"]: f["upstream_status"] for f in findings if f["invariant"] == "idle-inflation"}
    local = LOCAL.format(stack="ngtcp2", version="git-0123456789", release="1.25.0")
    assert status == {"ngtcp2@1.25.0": NEW, "ngtcp2@git-0123456789": local}
    assert all(f["upstream_status"] != NEW for f in findings if f["stack"] == "ngtcp2@git-0123456789")
    md = next(out.glob("findings/*ngtcp2-git-0123456789--idle-inflation*/finding.md")).read_text()
    assert md.startswith(f"**Status: {local}**") and "Where to report" not in md
    assert "(bug report)" not in next(out.glob("findings/*ngtcp2-git-0123456789--idle-inflation*/index.html")).read_text()
    terminal = " ".join(capsys.readouterr().out.split())
    assert terminal.count("local build of ngtcp2@git-0123456789") == 1      # the violation; not the consequence
    assert "(`--against ngtcp2@1.25.0`) before filing" in terminal


def test_the_default_run_takes_pinned_releases_only_and_stacks_marks_a_gone_source(checkout_builds, capsys,
                                                                                    monkeypatch):
    """Leftover checkout builds of a deleted temp folder joined every default run silently:
    now a checkout joins when named, and `ccdiff stacks` says whose source folder is gone."""
    from ccdiff.matrix import default_specs
    from ccdiff.stacks import available
    specs = default_specs()
    assert "ngtcp2@1.25.0" in specs
    assert not [s for s in specs if "git-" in s or "local-" in s], specs
    rows = {r["version"]: r for r in available() if r["stack"] == "ngtcp2"}
    assert rows["git-0123456789"]["built"] and not rows["git-0123456789"]["default"]
    assert rows["git-0123456789"]["source_gone"] is False
    assert rows["local-0123456789ab"]["source_gone"] is True
    assert "source_gone" not in rows["1.25.0"]
    monkeypatch.setenv("COLUMNS", "300")    # the phrase on one line, whatever the runner's console
    assert main(["stacks"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert shown.count("source folder is gone") == 1
    assert main(["versions", "ngtcp2", "--offline"]) == 0              # and so does `ccdiff versions`
    shown = " ".join(capsys.readouterr().out.split())
    assert shown.count("source folder is gone") == 1
    assert main(["replay", str(ROOT / "examples" / "idle-restart.jsonl"),
                 "--stack", "ngtcp2@git-0123456789"]) == 1               # named: it runs
