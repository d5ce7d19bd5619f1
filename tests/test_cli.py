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
    assert examples and all(f"ccdiff {name}" in line or "ccdiff" in line for line in examples)
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
