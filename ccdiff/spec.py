"""Stack SPECs: ``name[@version][:key=value,...]``.

    oracle                      RFC 9438 CUBIC reference
    oracle:idle=last-send       a mutant of it
    quiche@0.26.0               a built stack
    quiche@0.30.0:idle_fix=off  with an option
    quiche-reno@0.26.0          an alias from quiche's stack.toml (cc=reno)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import SetupError

_SPEC = re.compile(r"^(?P<name>[a-z][a-z0-9_-]*)(?:@(?P<version>[A-Za-z0-9._+-]+))?(?::(?P<opts>.*))?$")


@dataclass(frozen=True)
class Spec:
    name: str
    version: str | None
    options: tuple  # ((key, value), ...) in the order given

    @property
    def options_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.options)

    def __str__(self) -> str:
        text = self.name + (f"@{self.version}" if self.version else "")
        return text + (f":{self.options_text}" if self.options else "")


def parse_spec(text: str) -> Spec:
    match = _SPEC.match(text.strip())
    if not match:
        raise SetupError(f"bad stack spec {text!r}: expected name[@version][:key=value,...], "
                         "e.g. oracle, quiche@0.26.0, quiche@0.30.0:idle_fix=off")
    options = []
    if match["opts"]:
        for item in match["opts"].split(","):
            key, sep, value = item.partition("=")
            if not sep or not key or not value:
                raise SetupError(f"bad option {item!r} in stack spec {text!r}: expected key=value")
            if any(k == key.strip() for k, _ in options):   # which one would the stack take?
                raise SetupError(f"option {key.strip()!r} given twice in stack spec {text!r}")
            options.append((key.strip(), value.strip()))
    return Spec(match["name"], match["version"], tuple(options))
