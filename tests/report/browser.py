"""Headless Chromium for the report tests: load a page, collect console messages, DOM, screenshot."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CONSOLE = re.compile(r":(?:INFO|WARNING|ERROR|VERBOSE\d*):CONSOLE[^\]]*\] (.*)")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is not installed: run bash setup/install.sh system test (or make test)"
    return found


def load(page: Path, profile: Path, screenshot: Path | None = None) -> tuple[str, list]:
    """(DOM after load, console messages).  With screenshot, also writes a PNG of the page."""
    profile.mkdir(parents=True, exist_ok=True)
    base = [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
            "--window-size=1200,1600"]
    url = page.resolve().as_uri()
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    messages = CONSOLE.findall(dom.stderr)
    if screenshot is not None:
        shot = subprocess.run(base + [f"--screenshot={screenshot}", url], capture_output=True, text=True,
                              timeout=120)
        assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
        messages += CONSOLE.findall(shot.stderr)
    return dom.stdout, messages
