"""Issue #32: one schema for scenario files (ccdiff/sim/scenario.py SCHEMA), shared by sim,
conform and validate.  Each value below made `sim` loop forever, grow to gigabytes, or write
traces that `replay` refuses on 3c176b9; each is now refused with the file and the field."""
from __future__ import annotations

import json

import pytest

from ccdiff.cli import main
from ccdiff.errors import SetupError
from ccdiff.sim.scenario import available_scenarios, load_scenario

HOSTILE = [
    ("[connection]\nmax_datagram_size = true", "max_datagram_size = true: expected an integer"),
    ("[connection]\nmax_datagram_size = 1", "max_datagram_size = 1: expected 1,200 to 65,527"),
    ("[connection]\nmax_datagram_size = 10_000_000", "max_datagram_size = 10000000: expected 1,200"),
    ("[sender]\npto_probes = 1e9", "pto_probes = 1000000000.0: expected an integer from 1 to 2"),
    ("[app]\npattern = \"bursts\"\nbursts = 100_000_000\nperiod_us = 10", "bursts = 100000000: expected 1 to"),
    ("[loss]\nrate = nan", "[9007199254740992, nan] is not a [microseconds, rate] pair"),
    ("[path]\nbase_rtt_us = -5", "base_rtt_us = -5: expected 2 to"),
    ("[path]\njitter_us = 1.5", "jitter_us = 1.5: expected an integer"),
    ("[path]\nreorder_rate = inf", "reorder_rate = inf: expected a finite number"),
    ("[loss]\nblackouts = [[5, \"x\"]]", "blackouts: [5, 'x'] is not a [microseconds, microseconds] pair"),
    ("[loss]\nloss_schedule = 3", "loss_schedule must be a list"),
]


@pytest.mark.parametrize("body,message", HOSTILE)
def test_a_hostile_value_is_refused_by_sim_conform_and_validate(tmp_path, capsys, body, message):
    path = tmp_path / "hostile.toml"
    path.write_text(f'name = "hostile"\n{body}\n')
    with pytest.raises(SetupError, match=f"^{path}: "):
        load_scenario(str(path))
    for argv in (["sim", str(path)], ["validate", str(path)],
                 ["conform", "--stack", "oracle", "--scenario", str(path), "--seeds", "1",
                  "--out", str(tmp_path / "out")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}: ") and message in err, err


def test_a_name_that_cannot_name_a_folder_is_refused(tmp_path):
    for name in ("..", " ", "a\x1bb"):
        path = tmp_path / "n.toml"
        path.write_text(f"name = {json.dumps(name)}\n")     # TOML reads JSON's \u escapes
        with pytest.raises(SetupError, match="expected a readable name"):
            load_scenario(str(path))


def test_every_catalog_scenario_fits_the_schema(capsys):
    from ccdiff.sim.scenario import scenarios_dir
    paths = [str(scenarios_dir() / f"{name}.toml") for name in available_scenarios()]
    paths += [str(p) for p in sorted((scenarios_dir() / "coverage").glob("*.toml"))]
    assert main(["validate", *paths]) == 0
    assert capsys.readouterr().out.count(": ok, scenario ") == len(paths)


def test_sim_gives_up_after_its_timeout(capsys):
    assert main(["sim", "death-spiral", "--stack", "oracle", "--timeout", "0.01"]) == 2
    assert "still running after 0.01 s (--timeout)" in capsys.readouterr().err


def test_the_sim_help_example_runs(capsys):
    """`--set base_rtt_us=40000`, the example of `sim --help` (it was rtt_ms=40, refused)."""
    from ccdiff.cli import build_parser
    help_text = build_parser()._subparsers._group_actions[0].choices["sim"].format_help()
    assert "base_rtt_us=40000" in help_text
    assert main(["sim", "tail-loss", "--set", "base_rtt_us=40000", "--no-controls", "--json"]) in (0, 1)
    assert '"base_rtt_us"' not in capsys.readouterr().err
