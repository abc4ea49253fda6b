"""What the CLI printed, as the user reads it: lines wrapped to the terminal joined back."""
from __future__ import annotations


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def unwrapped(text: str) -> str:
    """The CLI wraps long lines at $COLUMNS (else 120) with textwrap, continuation lines indented
    deeper than the first ('  - reason' -> '    ...', 'note: ...' -> '  ...'): each wrapped line
    joined back into one, so a test can look for a whole reason or note."""
    out: list[str] = []
    first = 0
    for line in text.splitlines():
        if out and line.strip() and _indent(line) > first and not line.lstrip().startswith("- ") \
                and out[-1].strip():
            out[-1] += " " + line.strip()
        else:
            out.append(line)
            first = _indent(line)
    return "\n".join(out)
