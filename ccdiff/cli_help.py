"""One way to declare a subcommand, so every `ccdiff COMMAND --help` has a description
and examples (tests/test_cli.py walks the parser and checks it), and the options several
subcommands share (--qlog-schema), defined once for cli.py and fuzzing/."""
from __future__ import annotations

import argparse
import textwrap


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs: a one-line paragraph (blank-line separated) is wrapped to
    the terminal; a paragraph of several lines (a heading and its examples) is kept
    verbatim, so an example is never split in the middle of a command."""

    def _fill_text(self, text, width, indent):
        out = []
        for paragraph in text.split("\n\n"):
            lines = paragraph.splitlines()
            if len(lines) != 1:
                out.append(paragraph)
            else:
                out.append(textwrap.fill(" ".join(paragraph.split()), width, initial_indent=indent,
                                         subsequent_indent=indent))
        return "\n\n".join(out)


def add_command(sub, name: str, *, summary: str, description: str, examples: list[str]):
    """A subparser whose --help shows `description`, the options, then `examples`."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    return sub.add_parser(name, help=summary, description=description, epilog=epilog,
                          formatter_class=HelpFormatter)


class Once(argparse.Action):
    """An option that takes one value (fuzz and serve drive one stack): given twice, it is
    an error, not a silent "the last one wins" (elsewhere --stack repeats)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: this command takes one stack "
                         "(run it once per stack)")
        setattr(namespace, self.dest, values)


# The qlog schema choices, without importing the report package (Jinja2, matplotlib) to parse.
QLOG_SCHEMAS = ("0.3", "draft")
QLOG_SCHEMA_HELP = ("qlog the report writes: 0.3 (default) is qlog 0.3 JSON-SEQ with transport:/recovery: "
                    "event names, which qvis's congestion graph plots; draft uses the current qlog "
                    "draft's quic: names and file_schema header (docs/reports.md)")


def add_qlog_option(p) -> None:
    p.add_argument("--qlog-schema", choices=QLOG_SCHEMAS, default="0.3", help=QLOG_SCHEMA_HELP)
