"""What a release supports, read from its code at build time (recorded in build-info.json).

A feature's name says nothing about whether the code has it: quiche 0.26.1 has the
idle-restart fix always on and no RecoveryConfig field for it; 0.27.0 added the
field.  The probe reads the unpacked source and records, per feature:

  state    "always on" (the code has it, no switch), "flag" (a switch exists),
           "absent" (the code does not have it)
  default  with "flag": the switch's default ("on" / "off")
  option   the adapter option naming it (idle_fix), and which values the release can honour

Commands consult it before handing options to the adapter (ccdiff/stacks.py):
an option the release cannot honour is refused with the reason; one that only
restates what the code always does is accepted as a no-op.
"""
from __future__ import annotations

import re
from pathlib import Path


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _quiche_crate(src: Path) -> Path | None:
    for crate in (src, src / "quiche"):
        if (crate / "src/recovery/congestion/cubic.rs").is_file():
            return crate
    return None


def probe_quiche(src: Path) -> dict:
    crate = _quiche_crate(src)
    if crate is None:
        return {}
    cc = crate / "src/recovery/congestion"
    cubic = _read(cc / "cubic.rs")
    config_text = _read(crate / "src/recovery/mod.rs") + _read(cc / "mod.rs")
    lib = _read(crate / "src/lib.rs")
    features = {}
    # The fix: idle measured from the last ACK as well as the last send (cubic.rs keeps
    # last_ack_time and takes max(last_ack_time, last_sent_time) in on_packet_sent).
    fixed_code = "last_ack_time" in cubic
    flag = "enable_cubic_idle_restart_fix" in config_text
    if flag:
        default_on = bool(re.search(r"enable_cubic_idle_restart_fix:\s*true", lib))
        features["idle_fix"] = {"state": "flag", "default": "on" if default_on else "off",
                                "option": "idle_fix", "accepts": ["on", "off"],
                                "evidence": "RecoveryConfig.enable_cubic_idle_restart_fix"}
    elif fixed_code:
        features["idle_fix"] = {"state": "always on", "option": "idle_fix", "accepts": ["on"],
                                "evidence": "cubic.rs tracks last_ack_time; no enable_cubic_idle_restart_fix"}
    else:
        features["idle_fix"] = {"state": "absent", "option": "idle_fix", "accepts": ["off"],
                                "evidence": "cubic.rs measures idle from last_sent_time only"}
    if re.search(r"pub hystart:\s*bool", config_text):
        features["hystart"] = {"state": "flag", "default": "on", "option": "hystart", "accepts": ["on", "off"],
                               "evidence": "RecoveryConfig.hystart"}
    elif (cc / "hystart.rs").is_file():
        features["hystart"] = {"state": "always on", "option": "hystart", "accepts": ["on"],
                               "evidence": "hystart.rs without a RecoveryConfig switch"}
    return features


PROBES = {"quiche": probe_quiche}


def probe(stack: str, src: Path) -> dict:
    fn = PROBES.get(stack)
    return fn(src) if fn else {}


def describe(features: dict) -> str:
    """'idle fix: always on, hystart: flag (default on)'"""
    parts = []
    for name, f in features.items():
        text = f["state"] + (f" (idle_fix=on|off, default {f['default']})" if name == "idle_fix" and
                             f["state"] == "flag" else f" (default {f['default']})" if f["state"] == "flag" else "")
        parts.append(f"{name.replace('_', ' ')}: {text}")
    return ", ".join(parts)


def filter_options(label: str, version: str, features: dict, options: tuple) -> tuple:
    """Options as the adapter should receive them: refused when the code cannot honour them,
    dropped when they restate what the code always does (no switch to set)."""
    from .errors import SetupError
    by_option = {f["option"]: (name, f) for name, f in features.items() if f.get("option")}
    kept = []
    for key, value in options:
        if key in by_option:
            name, f = by_option[key]
            if value not in f["accepts"]:
                raise SetupError(f"{label}: option {key}={value}: {label.split('@')[0]} {version} has the "
                                 f"{name.replace('_', ' ')} {f['state']} ({f['evidence']}); "
                                 f"it can only run {key}={'|'.join(f['accepts'])}")
            if f["state"] != "flag":
                continue                 # nothing to switch: the code always behaves so
        kept.append((key, value))
    return tuple(kept)
