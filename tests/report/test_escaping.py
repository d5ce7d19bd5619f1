"""Everything from a trace or a stack is escaped in the HTML (Jinja2 autoescape).

A trace whose file name, name and comment are HTML/JS payloads must come out
as text: no element, attribute or script of its own in any page, in the
source and in the DOM Chromium builds from it.
"""
from __future__ import annotations

import json
import re

from ccdiff.cli import main

from .browser import load
from .conftest import DEATH_SPIRAL

NAME = "<script>alert(1)</script>"
COMMENT = '"><img src=x onerror=alert(2)>'
FILE = 'x"><svg onload=alert(3)>.jsonl'
PAYLOADS = [NAME, COMMENT, "<svg onload=alert(3)>", "<img src=x onerror", "<script>"]


def _hostile_report(tmp_path):
    lines = DEATH_SPIRAL.read_text().splitlines()
    header = json.loads(lines[0])
    header.update(name=NAME, comment=COMMENT)
    trace = tmp_path / FILE
    trace.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    findings, out = tmp_path / "f.json", tmp_path / "report"
    assert main(["replay", str(trace), "--stack", "oracle:idle=last-send", "--json", str(findings),
                 "--report", str(out)]) == 1
    return out


def test_hostile_trace_is_escaped_in_every_page(tmp_path):
    out = _hostile_report(tmp_path)
    pages = sorted(out.rglob("*.html"))
    assert len(pages) >= 3
    for page in pages:
        html = page.read_text()
        for payload in PAYLOADS:
            assert payload not in html, (page, payload)
        assert len(re.findall(r"<script", html, re.I)) == 0
    index = (out / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in index
    (finding,) = [p for p in pages if "future-recovery-start" in str(p)]
    html = finding.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html               # header name, in the table
    assert "&lt;svg onload=alert(3)&gt;" in html                            # the trace path
    assert "&#34;name&#34;: &#34;&lt;script&gt;" in html                    # the header line in the excerpt
    # Output files are named from slugs: no payload reaches the file system layout.
    assert all(re.fullmatch(r"[A-Za-z0-9._/-]+", p.relative_to(out).as_posix()) for p in out.rglob("*"))


def test_hostile_trace_in_markdown_stays_code(tmp_path):
    out = _hostile_report(tmp_path)
    (md,) = [p for p in out.rglob("finding.md") if "future-recovery-start" in str(p)]
    text = md.read_text()
    fenced = re.sub(r"```.*?```", "", text, flags=re.S)     # outside code blocks ...
    for payload in (NAME, COMMENT):
        for line in fenced.splitlines():
            if payload in line:                              # ... only inside code spans
                assert f"`{payload}`" in line or f"`` {payload} ``" in line, line


def test_hostile_pages_in_chromium_run_nothing(tmp_path):
    out = _hostile_report(tmp_path)
    (finding,) = [p for p in out.rglob("index.html") if "future-recovery-start" in str(p)]
    for page in (out / "index.html", finding):
        dom, messages = load(page, tmp_path / "profile")
        assert messages == []
        assert "<script" not in dom and "onerror=" not in dom.replace("onerror=alert(2)&gt;", "")
        assert "<svg" not in dom
        assert "alert(1)" in dom                               # the text is there, as text


def test_hostile_stack_texts_are_escaped(death_report, tmp_path, monkeypatch):
    """Texts from a stack's own files (profile.toml, provenance.toml) are escaped too."""
    import shutil
    from ccdiff.paths import build_dir, implementations_dir
    home = tmp_path / "home"
    shutil.copytree(implementations_dir(), home / "implementations")
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(build_dir()))     # the real builds
    monkeypatch.setenv("CCDIFF_HOME", str(home))
    quiche = home / "implementations" / "quiche"
    profile = (quiche / "profile.toml").read_text()
    profile = profile.replace('summary = "After idle', 'summary = "<script>alert(4)</script> After idle')
    (quiche / "profile.toml").write_text(profile)
    # The version note and how ccdiff drove the stack are read from provenance.toml.
    prov = (quiche / "provenance.toml").read_text()
    prov = prov.replace('note = "carries the idle-restart', 'note = "<img src=x onerror=alert(5)> carries')
    (quiche / "provenance.toml").write_text(prov.replace('driven = """', 'driven = """<b onclick=x>'))
    out = tmp_path / "report"
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "quiche@0.26.0", "--report", str(out)]) == 1
    html = (out / "findings" / "death-spiral--quiche-0.26.0--future-recovery-start" / "index.html").read_text()
    assert "<script>alert(4)" not in html and "&lt;script&gt;alert(4)&lt;/script&gt; After idle" in html
    assert "<img src=x onerror=alert(5)>" not in html and "&lt;img src=x onerror=alert(5)&gt; carries" in html
    assert "<b onclick" not in html and "&lt;b onclick=x&gt;ccdiff builds" in html
