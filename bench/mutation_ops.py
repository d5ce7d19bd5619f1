"""The mutation operators and the Mutant both operator sets make: the C set over C tokens
(bench/mutation.py) and the same tables over Python's tokens (bench/mutation_python.py).
Imported by both, so neither imports the other for them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROR = {"<": ("<=", ">="), "<=": ("<", ">"), ">": (">=", "<="), ">=": (">", "<"), "==": ("!=",), "!=": ("==",)}
AOR = {"+": ("-",), "-": ("+",), "*": ("/",), "/": ("*",),
       "+=": ("-=",), "-=": ("+=",), "*=": ("/=",), "/=": ("*=",)}
LCR = {"&&": ("||",), "||": ("&&",)}
OPERATORS = ("ror", "aor", "lcr", "icr", "neg")


@dataclass(frozen=True)
class Mutant:
    file: str        # inside the stack's source tree
    function: str    # the enclosing function ("" at file scope)
    line: int
    col: int
    operator: str
    start: int       # the replaced span of the file's text
    end: int
    old: str
    new: str
    kind: str = ""   # cargo-mutants' genre (FnValue, BinaryOperator, UnaryOperator); "" for C

    @property
    def id(self) -> str:
        new = "!" if self.operator == "neg" else self.new or "delete"
        return f"{Path(self.file).name}:{self.line}:{self.col}:{self.operator}:{new}"

    def apply(self, text: str) -> str:
        assert text[self.start:self.end] == self.old, f"{self.id}: the source is not the one mutated"
        return text[:self.start] + self.new + text[self.end:]


def _int_value(text: str) -> tuple[int, str, str] | None:
    """(value, suffix, base) of an integer literal; None for an octal one (left alone)."""
    digits = text.rstrip("uUlL")
    suffix = text[len(digits):]
    if digits[:2].lower() == "0x":
        return int(digits, 16), suffix, "hex"
    if len(digits) > 1 and digits.startswith("0"):
        return None
    return int(digits), suffix, "dec"


def int_replacements(text: str) -> list[str]:
    parsed = _int_value(text)
    if parsed is None:
        return []
    value, suffix, base = parsed
    values = [value + 1] + ([value - 1] if value > 0 else [])
    return [(f"0x{v:x}" if base == "hex" else str(v)) + suffix for v in values]
