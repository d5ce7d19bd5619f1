"""The command line itself: help texts, option spelling, error locations, table widths, units."""
from __future__ import annotations

import argparse

import pytest

from ccdiff.cli import build_parser, main


def _subcommands():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices.items())


@pytest.mark.parametrize("name,parser", _subcommands())
def test_every_subcommand_has_a_description_an_example_and_help_on_every_option(name, parser):
    assert parser.description and len(parser.description) > 40, name
    assert parser.epilog and parser.epilog.startswith("examples:\n  ccdiff "), name
    examples = parser.epilog.splitlines()[1:]
    assert examples and all("ccdiff" in line for line in examples)
    assert any(f"ccdiff {name}" in line for line in examples), name
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.option_strings or action.dest}"
    text = parser.format_help()
    assert "examples:\n  ccdiff" in text


def test_the_top_level_lists_every_subcommand_with_a_summary():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    summaries = {choice.dest: choice.help for choice in sub._choices_actions}
    assert set(summaries) == {name for name, _ in _subcommands()}
    assert all(summaries.values())


@pytest.mark.parametrize("argv", [
    ["conform", "--stack", "oracle", "--stack", "oracle-reno,oracle:idle=last-send,fast_convergence=off"],
    ["conform", "--stacks", "oracle,oracle-reno", "--stacks", "oracle:idle=last-send,fast_convergence=off"],
    ["conform", "--stack", "oracle", "--stacks", "oracle-reno", "--stack", "oracle:idle=last-send",
     "--stack", "fast_convergence=off"],
])
def test_conform_takes_stack_repeated_comma_lists_and_the_stacks_alias(argv):
    args = build_parser().parse_args(argv)
    assert args.stacks == ["oracle", "oracle-reno", "oracle:idle=last-send,fast_convergence=off"]


@pytest.mark.parametrize("command", [["replay", "t.jsonl"], ["matrix", "t.jsonl"], ["sim", "death-spiral"]])
def test_stack_is_repeatable_and_takes_comma_lists_everywhere(command):
    args = build_parser().parse_args(command + ["--stack", "oracle,oracle-reno", "--stack", "oracle:idle=none"])
    assert args.stack == ["oracle", "oracle-reno", "oracle:idle=none"]


def test_conform_runs_with_the_new_spelling(tmp_path):
    assert main(["conform", "--stack", "oracle", "--scenario", "tail-loss", "--seeds", "1", "--jobs", "1",
                 "--out", str(tmp_path), "--no-report"]) == 0


@pytest.mark.parametrize("argv", [
    ["validate", "{missing}"],
    ["replay", "{missing}"],
    ["matrix", "{missing}"],
    ["decode", "{missing}"],
    ["encode", "{missing}", "-o", "{tmp}/seed.bin"],
    ["report", "{missing}", "--out", "{tmp}/out"],
    ["sim", "{missing}.toml"],
])
def test_a_missing_file_is_named_with_the_reason_and_no_line_number(argv, tmp_path, capsys):
    missing = str(tmp_path / "absent")
    argv = [a.format(missing=missing, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"{argv[1]}: cannot read: No such file or directory"), err
    assert ":0:" not in err[-1]


def test_a_non_utf8_trace_names_its_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"ccdiff_trace": 1}\n{"t": 0, "ev": "s\xffent"}\n')
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {path}:2: not UTF-8 text (byte 18 of the line)"


# Labels as long as real ones (quiche-reno@0.26.0 is 18 characters): NAME=SPEC reports a real
# oracle variant under a name, so these tests need no built stack.
LONG_LABELS = ["oracle-idle-last-send=oracle:idle=last-send", "oracle-no-fastconv=oracle:fast_convergence=off"]
ALL_SCENARIOS = ["ack-aggregation", "app-limited", "death-spiral", "high-bdp", "idle-restart", "outage-3s",
                 "persistent-congestion", "real-aioquic-cubic-blackout", "reordering", "rtt-jitter",
                 "shallow-buffer", "tail-loss"]


def _lines_fit(text: str, width: int) -> bool:
    return all(len(line) <= width for line in text.splitlines())


@pytest.fixture(scope="module")
def conform_80(tmp_path_factory):
    """One real conform run (every scenario, one seed) printed at 80 columns, piped."""
    import os
    import subprocess
    import sys
    out = tmp_path_factory.mktemp("conform")
    argv = [sys.executable, "-m", "ccdiff", "conform", "--stack", "oracle", "--seeds", "1", "--jobs", "1",
            "--traces", "none", "--no-report", "--out", str(out)]
    for label in LONG_LABELS:
        argv += ["--stack", label]
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, COLUMNS="80"), timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def test_conform_tables_at_80_columns_keep_every_stack_and_scenario_name_whole(conform_80):
    assert _lines_fit(conform_80, 80)
    assert "…" not in conform_80
    for label in ["oracle", "oracle-reno", "oracle-idle-last-send", "oracle-no-fastconv"]:
        assert f" {label} " in conform_80, label
    for name in ALL_SCENARIOS:
        assert f" {name}\n" in conform_80 or f" {name} " in conform_80, name


def test_conform_pass_rates_name_scenarios_with_a_legend_when_they_do_not_fit(conform_80):
    legend = conform_80[conform_80.index("scenarios:\n"):].splitlines()[1:1 + len(ALL_SCENARIOS)]
    assert [line.split() for line in legend] == [[str(i), name] for i, name in enumerate(ALL_SCENARIOS, 1)]


def test_conform_uses_full_scenario_names_when_the_console_is_wide(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["conform", "--stack", "oracle", "--scenario", "tail-loss,death-spiral", "--seeds", "1",
                 "--jobs", "1", "--no-report", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("┃ stack"))
    assert "death-spiral" in header and "tail-loss" in header and "scenarios:" not in out


@pytest.mark.parametrize("width", [80, 60])
def test_replay_at_narrow_widths_keeps_names_whole(width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    stacks = ["oracle", "oracle:idle=last-send,fast_convergence=off"]
    assert main(["replay", "examples/death-spiral.jsonl"] + sum((["--stack", s] for s in stacks), [])) == 1
    out = capsys.readouterr().out
    assert _lines_fit(out, width) and "…" not in out
    for name in stacks + ["future-recovery-start", "stuck-at-minimum"]:
        assert name in out, name


@pytest.mark.parametrize("width", [80, 50])
def test_matrix_at_narrow_widths_keeps_stack_and_invariant_names_whole(width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    stacks = ["oracle", "oracle:idle=last-send", "oracle:idle=none", "oracle-reno"]
    main(["matrix", "examples/death-spiral.jsonl", "examples/idle-restart.jsonl"]
         + sum((["--stack", s] for s in stacks), []))
    out = capsys.readouterr().out
    assert _lines_fit(out, width) and "…" not in out
    for name in stacks + ["future-recovery-start", "stuck-at-minimum"]:
        assert f" {name} " in out or f" {name}\n" in out, name


def test_scenarios_prints_whole_descriptions_wrapped_and_indented(monkeypatch, capsys):
    from ccdiff.sim.scenario import load_scenario
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert _lines_fit(out, 80)
    for name in ALL_SCENARIOS:
        assert f"\n{name}\n" in f"\n{out}"
        words = " ".join(load_scenario(name).purpose.split())
        assert words in " ".join(out.split()), name
    # every line is a name or an indented line of its description; the connection-mode
    # scenarios (scenarios/connection/) come after the catalog, marked
    from ccdiff.sim.scenario import connection_scenarios
    assert connection_scenarios() == ["death-spiral-loopback"]
    assert out.index("\ndeath-spiral-loopback\n    (connection mode, scenarios/connection/)") > \
        out.index(f"\n{ALL_SCENARIOS[-1]}\n")
    names = set(ALL_SCENARIOS + connection_scenarios())
    assert all(line in names or line.startswith("    ") for line in out.splitlines())


@pytest.fixture(scope="module")
def sim_runs():
    """`ccdiff sim death-spiral` of the oracle with the idle bug (idle from the last send,
    quiche < 0.28's rule), as text at 80 columns and as JSON."""
    import os
    import subprocess
    import sys
    argv = [sys.executable, "-m", "ccdiff", "sim", "death-spiral", "--stack", "oracle:idle=last-send", "--seed", "0"]
    env = dict(os.environ, COLUMNS="80")
    text = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    raw = subprocess.run(argv + ["--json"], capture_output=True, text=True, env=env, timeout=600)
    return text, raw


def test_sim_prints_the_stack_beside_the_oracle_and_the_reno_control_in_human_units(sim_runs):
    text, _ = sim_runs
    assert text.returncode == 1, text.stderr
    out = text.stdout
    assert _lines_fit(out, 80) and "None" not in out and "flips=" not in out
    header = next(line for line in out.splitlines() if "oracle:idle=last-send" in line and line.startswith("┃"))
    assert [cell.strip() for cell in header.split("┃")[2:5]] == ["oracle:idle=last-send", "oracle", "oracle-reno"]
    completion = " ".join(line.split("│")[2].strip() for line in out.splitlines()
                          if line.startswith("│") and line.split("│")[2].strip() and
                          (line.split("│")[1].strip() in ("completion", "")))
    assert "did not complete in 10 s (2.34 MB of 10 MB delivered)" in completion
    assert "recovery↔avoidance: transitions between recovery and congestion avoidance" in " ".join(out.split())
    assert "oracle:idle=last-send does not pass:" in out


def test_sim_json_keeps_raw_values_for_every_run(sim_runs):
    import json
    from ccdiff.units import duration, size
    text, raw = sim_runs
    assert raw.returncode == 1, raw.stderr
    doc = json.loads(raw.stdout)
    assert (doc["scenario"], doc["seed"]) == ("death-spiral", 0)
    runs = {run["stack"]: run for run in doc["runs"]}
    assert [(run["stack"], run["role"]) for run in doc["runs"]] == [
        ("oracle:idle=last-send", "stack"), ("oracle", "control"), ("oracle-reno", "control")]
    bugged, oracle = runs["oracle:idle=last-send"]["metrics"], runs["oracle"]["metrics"]
    assert bugged["completion_us"] is None and size(bugged["delivered_bytes"]) == "2.34 MB"
    assert isinstance(oracle["completion_us"], int) and runs["oracle"]["status"] == "pass"
    # the text shows the same run in human units
    assert f"│ {duration(oracle['completion_us'])} " in text.stdout
    assert str(bugged["recovery_transitions"]) in text.stdout


QUICHE = "quiche@0.26.0"


def test_a_fuzz_run_with_no_fuzzing_time_executes_nothing_and_exits_2(tmp_path, capsys):
    """The real Hypothesis engine given no time runs no example: exit 2, never '0 new findings'."""
    assert main(["fuzz", "--stack", QUICHE, "--engine", "hypothesis", "--time", "0s",
                 "--findings", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "new finding" not in captured.out
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("error: fuzz: hypothesis executed 0 inputs in 0 s of fuzzing (at least 1 expected)")


class _IdleCampaign:
    """An engine that starts, runs for the whole budget and executes nothing (a harness
    that never gets an input, an engine stuck in calibration): only the exit-code logic
    of `ccdiff fuzz` is under test here."""

    def __init__(self, *args, **kwargs):
        self.started = False

    def executions(self):
        return 0

    def start(self):
        self.started = True

    def running(self):
        return True

    def stats(self):
        return {"execs_per_sec": 0.0, "coverage": "-", "corpus": 0, "crashes": 0, "execs": 0}

    halted_at = None

    def halt_at(self, deadline):
        """As Campaign.halt_at: stopped at the deadline on a timer of its own."""
        import threading
        import time
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), self.stop)
        timer.daemon = True
        timer.start()
        return timer

    def stop(self):
        import time
        if self.halted_at is None:
            self.halted_at = time.monotonic()

    def failure(self):
        return None

    def crash_files(self):
        return []

    def queue_files(self):
        return []


def test_an_engine_that_executes_nothing_exits_2(tmp_path, monkeypatch, capsys):
    from ccdiff.fuzzing import engines
    monkeypatch.setitem(engines.ENGINES, "afl", _IdleCampaign)
    assert main(["fuzz", "--stack", QUICHE, "--engine", "afl", "--time", "1s", "--findings", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: fuzz: afl executed 0 inputs in 1 s of fuzzing" in err
    assert "0 executions" in err and "crashes" not in err


def test_fuzz_progress_uses_each_engines_words():
    from ccdiff.fuzzing.command import Status
    hypo = Status("hypothesis").line(5, {"execs_per_sec": 300, "execs": 1500, "rounds": 8, "violations": 2}, 3)
    assert hypo == "[hypothesis]      5 s  1500 examples (300/s)  8 rounds  violations 2  findings 3"
    afl = Status("afl").line(5, {"execs_per_sec": 900, "execs": 4500, "coverage": "1.20% map", "corpus": 40,
                                 "crashes": 2}, 1)
    assert afl == "[afl]      5 s  4500 executions (900/s)  coverage 1.20% map  corpus 40  aborted 2  findings 1"


def test_fuzz_builds_before_the_clock_starts(tmp_path, monkeypatch, capsys):
    """The build has its own progress line, then the clock starts: a build slower than
    the budget no longer eats it (the engine below would be stopped at once if the build
    counted)."""
    import time as real_time
    from ccdiff.fuzzing import command, engines

    class SlowBuild(_IdleCampaign):
        def __init__(self, *args, **kwargs):
            real_time.sleep(1.5)          # stands in for an instrumented build
            self.polls = 0

        def running(self):
            self.polls += 1
            return True

        def executions(self):
            return getattr(self, "polls", 0)

        def stats(self):
            return dict(super().stats(), execs=self.polls)
    monkeypatch.setitem(engines.ENGINES, "afl", SlowBuild)
    assert main(["fuzz", "--stack", QUICHE, "--engine", "afl", "--time", "1s", "--findings", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err.index(f"building {QUICHE} for afl (not counted in --time) ...") < err.index(f"built {QUICHE} for afl")
    assert err.index(f"built {QUICHE} for afl") < err.index(f"fuzzing {QUICHE} with afl for 1 s")
    assert "1 executions" in err


def test_stacks_at_60_columns_keeps_names_versions_and_options_whole(monkeypatch, capsys):
    from ccdiff.stacks import available
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["stacks"]) == 0
    out = capsys.readouterr().out
    assert _lines_fit(out, 60) and "…" not in out
    for row in available():
        assert f"│ {row['stack']} " in out and (not row["version"] or f" {row['version']} " in out)


@pytest.mark.parametrize("argv", [["fuzz", "--engine", "hypothesis", "--time", "1s"], ["serve"]])
def test_one_stack_commands_refuse_a_second_stack(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv + ["--stack", "quiche", "--stack", "ngtcp2"])
    assert exit_.value.code == 2
    assert "--stack given twice: this command takes one stack" in capsys.readouterr().err
