"""The C operator set (bench/mutation_ops.py) for a Python controller (aioquic's cubic.py).

Sites come from Python's own tokenizer (comments and strings are never mutated); the
enclosing function is the innermost `def` (a method's bare name, as `--functions` takes it):

  ror  <  -> <= >=   <= -> < >   >  -> >= <=   >= -> > <   == <-> !=
  aor  binary + <-> -,  * <-> /,  += <-> -=,  *= <-> /=,  ** -> *   (unary + and - left alone)
  lcr  and <-> or
  icr  integer literal n -> n+1 and n -> n-1 (floats left alone, as in C)
  neg  if / elif / while c:  ->  ... not (c):

    >>> [m.id for m in python_mutants("def f(x):\\n    return x + 1\\n", "a.py")]
    ['a.py:2:14:aor:-', 'a.py:2:16:icr:0', 'a.py:2:16:icr:2']
"""
from __future__ import annotations

import ast
import bisect
import io
import keyword
import tokenize

from mutation_ops import AOR, ROR, Mutant   # the same tables as the C set
from mutation_ops import int_replacements as _c_int_replacements

PY_AOR = {**AOR, "**": ("*",)}
PY_LCR = {"and": ("or",), "or": ("and",)}
OPERAND_END_OPS = {")", "]", "}"}
CONDITION_KEYWORDS = {"if", "elif", "while"}


def python_functions(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of every def, outermost first."""
    spans = [(node.lineno, node.end_lineno, node.name) for node in ast.walk(ast.parse(text))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted(spans)


def _enclosing(spans: list, line: int) -> str:
    inside = [s for s in spans if s[0] <= line <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else ""


def _is_operand_end(tok) -> bool:
    if tok.type == tokenize.NAME:
        return not keyword.iskeyword(tok.string) or tok.string in ("True", "False", "None")
    return tok.type in (tokenize.NUMBER, tokenize.STRING) or (tok.type == tokenize.OP and tok.string in OPERAND_END_OPS)


def _int_replacements(text: str) -> list[str]:
    """The C rule for a plain decimal literal; floats, 1e6, 0x.., 1_000 are left alone."""
    return _c_int_replacements(text) if text.isdigit() else []


def python_mutants(text: str, file: str, functions: list[str] | None = None) -> list[Mutant]:
    """Every mutant of one Python file's text, sorted by position then replacement; only
    inside the named functions when `functions` is given."""
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    offset = lambda pos: line_starts[pos[0] - 1] + pos[1]   # noqa: E731  (row 1-based, col 0-based)
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)]
    spans = python_functions(text)
    sites = []   # (operator, start, end, old, news)
    for i, tok in enumerate(tokens):
        start, end = offset(tok.start), offset(tok.end)
        previous = tokens[i - 1] if i else None
        if tok.type == tokenize.OP and tok.string in ROR:
            sites.append(("ror", start, end, tok.string, ROR[tok.string]))
        elif tok.type == tokenize.NAME and tok.string in PY_LCR:
            sites.append(("lcr", start, end, tok.string, PY_LCR[tok.string]))
        elif tok.type == tokenize.OP and tok.string in PY_AOR and (
                tok.string.endswith("=") or tok.string == "**" or (previous and _is_operand_end(previous))):
            sites.append(("aor", start, end, tok.string, PY_AOR[tok.string]))
        elif tok.type == tokenize.NUMBER and _int_replacements(tok.string):
            sites.append(("icr", start, end, tok.string, _int_replacements(tok.string)))
        elif tok.type == tokenize.NAME and tok.string in CONDITION_KEYWORDS:
            depth, j = 0, i + 1
            while j < len(tokens) and not (depth == 0 and tokens[j].string == ":"):
                depth += tokens[j].string in "([{" and tokens[j].type == tokenize.OP
                depth -= tokens[j].string in ")]}" and tokens[j].type == tokenize.OP
                j += 1
            cond_start, cond_end = offset(tokens[i + 1].start), offset(tokens[j - 1].end)
            old = text[cond_start:cond_end]
            sites.append(("neg", cond_start, cond_end, old, (f"not ({old})",)))
    out = []
    for operator, start, end, old, news in sites:
        line = bisect.bisect_right(line_starts, start)
        function = _enclosing(spans, line)
        if functions is not None and function not in functions:
            continue
        col = start - line_starts[line - 1] + 1
        for new in news:
            out.append(Mutant(file, function, line, col, operator, start, end, old, new))
    return sorted(out, key=lambda m: (m.file, m.start, m.end, m.new))


def python_function_names(text: str) -> list[str]:
    return [name for _, _, name in python_functions(text)]
