"""The small markdown subset the collector writes (summary.md, report/compare tables) -> HTML.

Tables are carried over cell by cell, so the HTML shows exactly the text of the markdown files
(the same formatting, the same rounding). Headings, bullets, paragraphs, **bold**, `code`.
"""
from __future__ import annotations

import html
import re

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    return _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", out)


def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?", line.strip()))


def table_html(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    def num(c: str) -> bool:
        return bool(re.match(r"^[+-]?[\d.]+", c)) or c == "-"
    th = "".join(f"<th>{inline(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="{"n" if num(c) else "t"}">{inline(c)}</td>' for c in r)
                   + "</tr>\n" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead>\n<tbody>\n{body}</tbody></table>\n'


def to_html(md: str, *, skip_title: bool = True, level_shift: int = 1) -> str:
    lines = md.splitlines()
    out: list[str] = []
    i = 0
    in_list = False

    def close_list():
        nonlocal in_list
        if in_list:
            out.append("</ul>")
            in_list = False

    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if s.startswith("|") and i + 1 < len(lines) and _is_rule(lines[i + 1]):
            close_list()
            head = _cells(line)
            rows, i = [], i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append(table_html(head, rows))
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", s)
        if m:
            close_list()
            if not (skip_title and len(m.group(1)) == 1):
                n = min(len(m.group(1)) + level_shift, 6)
                out.append(f"<h{n}>{inline(m.group(2))}</h{n}>")
        elif s.startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{inline(s[2:])}</li>")
        elif s.startswith("> "):
            close_list()
            out.append(f'<p class="warn">{inline(s[2:])}</p>')
        elif s:
            close_list()
            out.append(f"<p>{inline(s)}</p>")
        else:
            close_list()
        i += 1
    close_list()
    return "\n".join(out) + "\n"
