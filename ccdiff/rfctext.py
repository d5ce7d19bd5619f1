"""The RFC sources as plain text, by section, to check that quoted RFC text is verbatim.

The sources (rfc/, copied verbatim from the project's shared RFC folder; rfc/README.md
says where they come from) are the editors' kramdown files.  Text is
compared after the markup normalisation their README lists: `*x*` emphasis,
`{{ref}}` cross references (rendered as the RFC renders them: "Section 5.8",
"Figure 1", "[RFC5681]"), `{{{β}{}}}` symbols, `<sub>…</sub>` and line breaks.  Underscores
and backslashes are dropped on both sides, so "W_max", "*W<sub>max</sub>*" and "W\\_{max}"
all read "Wmax".  A quote may skip text with "..." between fragments that each appear,
in order, in the same section.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from .paths import project_root

SOURCES = {"9438": "rfc9438-source.md", "9002": "rfc9002-source.md"}
UNNUMBERED = {"Acknowledgments", "Contributors"}
ELLIPSIS = re.compile(r"\s*(?:\.\.\.|…)\s*")
HEADING = re.compile(r"^(#+)\s+(.*?)\s*(?:\{#([\w-]+)\})?\s*$")
BLOCK_ANCHOR = re.compile(r"^\{:\s*#([\w-]+)")
REF = re.compile(r"\{\{([^{}]*)\}\}")


def rfc_dir() -> Path:
    return project_root() / "rfc"


def normalise(text: str) -> str:
    text = text.replace("{{{β}{}}}", "β").replace("“", '"').replace("”", '"').replace("’", "'")
    text = re.sub(r"</?sub>", "", text)
    text = re.sub(r"[*_\\`]", "", text)
    return re.sub(r"\s+", " ", text).strip()


class RfcText:
    """One RFC: its sections (number -> normalised text) and where each anchor points."""

    def __init__(self, source: str):
        self.sections: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        raw = self._split(source.splitlines())
        for number, lines in raw.items():
            self.sections[number] = normalise(self._render_refs("\n".join(lines)))

    def _split(self, lines: list) -> dict:
        raw: dict[str, list] = {}
        counters: list = []
        part, current, figures, tables, in_code = None, None, 0, 0, False
        for line in lines:
            if line.startswith("--- "):
                part, counters, current = line[4:].strip(), [], None
                continue
            if line.startswith("~~~"):
                in_code = not in_code
            if part not in ("middle", "back"):
                continue
            heading = None if in_code else HEADING.match(line)
            if heading:
                current = self._number(part, counters, len(heading.group(1)), heading.group(2))
                if current is not None:
                    raw[current] = []
                    if heading.group(3):
                        self.labels[heading.group(3)] = self._section_label(current)
                continue
            anchor = BLOCK_ANCHOR.match(line)
            if anchor:
                name = anchor.group(1)
                if name.startswith("tab"):
                    tables += 1
                    self.labels[name] = f"Table {tables}"
                else:
                    figures += 1
                    self.labels[name] = f"Figure {figures}"
                continue
            if current is not None:
                raw[current].append(line)
        return raw

    @staticmethod
    def _number(part: str, counters: list, level: int, title: str):
        if title in UNNUMBERED:
            return None
        del counters[level:]
        while len(counters) < level:
            counters.append(0)
        counters[level - 1] += 1
        first = counters[0]
        head = chr(ord("A") + first - 1) if part == "back" else str(first)
        return ".".join([head] + [str(n) for n in counters[1:]])

    @staticmethod
    def _section_label(number: str) -> str:
        return ("Appendix " if number[0].isalpha() else "Section ") + number

    def _render_refs(self, text: str) -> str:
        def render(match) -> str:
            body = match.group(1).strip().lstrip("!?")
            of = re.match(r"(Section [\w.]+) of (\S+)", body)
            if of:
                return f"{of.group(1)} of [{of.group(2)}]"
            name = body.split("=")[0]
            return self.labels.get(name, f"[{name}]")
        return REF.sub(render, text)

    def section_of(self, number: str) -> str:
        """A section's text with its subsections (§7.3 includes §7.3.2)."""
        return " ".join(text for num, text in self.sections.items()
                        if num == number or num.startswith(number + "."))


@lru_cache(maxsize=None)
def load_rfc(number: str) -> RfcText:
    return RfcText((rfc_dir() / SOURCES[number]).read_text(encoding="utf-8"))


def fragments(quote: str) -> list:
    return [normalise(part) for part in ELLIPSIS.split(quote) if normalise(part)]


def find_quote(quote: str, rfc: str, section: str | None = None) -> str | None:
    """The section number where every fragment of the quote appears in order, else None."""
    text = load_rfc(rfc)
    parts = fragments(quote)
    if not parts:
        return None
    candidates = [section] if section else list(text.sections)
    for number in candidates:
        body = text.section_of(number) if section else text.sections[number]
        position = 0
        for part in parts:
            found = body.find(part, position)
            if found < 0:
                break
            position = found + len(part)
        else:
            return number
    return None
