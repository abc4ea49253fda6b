"""Bash words: every value that reaches bash goes through here.

A literal is single-quoted (shlex), so spaces, quotes, ``$``, backticks, globs and newlines arrive
as one literal argument. A ``Var`` is text the job expands at run time (hosts and ports known
only inside the allocation); it is double-quoted and may only contain ``${NAME}`` references.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_VAR_TEXT = re.compile(r"(?:\$\{[A-Z_][A-Z0-9_]*\}|[A-Za-z0-9_.:/@%+=,-])*")


@dataclass(frozen=True)
class Var:
    """Run-time text such as ``http://${R0_HEAD}:${R0_PORT}``."""

    text: str

    def __post_init__(self):
        if not _VAR_TEXT.fullmatch(self.text):
            raise ValueError(f"unsafe run-time word: {self.text!r}")


Word = "str | Var"


def word(w: "str | Var") -> str:
    if isinstance(w, Var):
        return f'"{w.text}"'
    q = shlex.quote(str(w))
    # Quote list-like words too (a,b): bash does not split them, but a reader and shellcheck might.
    return f"'{q}'" if "," in q and not q.startswith("'") else q


def words(ws) -> str:
    return " ".join(word(w) for w in ws)


def flag_words(flags) -> list[list[str]]:
    """SGLang-style flags from (name, value) pairs: true -> --name, false -> omitted,
    a list -> --name v1 v2, anything else -> --name value. Grouped per flag for readable output."""
    out = []
    for name, value in flags:
        if value is False or value is None:
            continue
        if value is True:
            out.append([f"--{name}"])
        elif isinstance(value, (list, tuple)):
            out.append([f"--{name}", *(_scalar(v) for v in value)])
        else:
            out.append([f"--{name}", _scalar(value)])
    return out


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
