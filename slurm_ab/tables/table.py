"""A table of text cells and its four renderings (markdown, CSV, JSON records, HTML): the one
place slurm-ab formats tables. tabulate and pandas are imported only when a table is rendered."""
from __future__ import annotations

import html as _html
import json
import math
from dataclasses import dataclass

DASH = "-"


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple, ...]                    # cells: text, or numbers tabulate aligns as such
    align: tuple[str, ...] | None = None      # per column: left | right (None: tabulate's choice)

    @classmethod
    def of(cls, headers, rows, align=None) -> "Table":
        return cls(tuple(str(h) for h in headers), tuple(tuple(r) for r in rows),
                   tuple(align) if align else None)

    def md(self) -> str:
        """GitHub markdown, cells as given (no number parsing: '0.80' stays '0.80')."""
        from tabulate import tabulate
        return tabulate(self.rows, headers=self.headers, tablefmt="github", disable_numparse=True,
                        colalign=self.align)

    def records(self) -> list[dict]:
        return [dict(zip(self.headers, (str(c) for c in r))) for r in self.rows]

    def csv(self) -> str:
        import csv
        import io
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(self.headers)
        w.writerows([[str(c) for c in r] for r in self.rows])
        return out.getvalue()

    def json(self) -> str:
        return json.dumps(self.records(), indent=2) + "\n"

    def text(self, width: int | None = None, keys: int = 1) -> str:
        """The markdown table fitted to a terminal of `width` columns (None: whole, as md()):
        a table of one to three rows is transposed (a column per row), a wider one is folded into
        several tables of the columns that fit, each beginning with the first `keys` columns."""
        whole = self.md()
        if width is None or widest(whole) <= width:
            return whole
        if len(self.rows) <= 3 and len(self.headers) > len(self.rows) + 1:
            flipped = self.transposed(keys)
            if widest(flipped.md()) <= width:
                return flipped.md()
        parts, cols = [], list(range(keys, len(self.headers)))
        while cols:
            take = [cols.pop(0)]
            while cols and widest(self._columns(take + cols[:1], keys).md()) <= width:
                take.append(cols.pop(0))
            parts.append(self._columns(take, keys).md())
        return "\n\n".join(parts)

    def moved(self, header: str, after: str) -> "Table":
        """The table with column `header` right after column `after`."""
        i, order = self.headers.index(header), list(range(len(self.headers)))
        order.remove(i)
        order.insert(self.headers.index(after) + 1 - (i < self.headers.index(after)), i)
        return self._columns(order, 0)

    def _columns(self, cols: list[int], keys: int) -> "Table":
        idx = list(range(keys)) + cols
        return Table.of([self.headers[i] for i in idx], [[r[i] for i in idx] for r in self.rows],
                        [self.align[i] for i in idx] if self.align else None)

    def transposed(self, keys: int = 1) -> "Table":
        """One row per column, one column per row (headed by its first `keys` cells)."""
        heads = [" ".join(str(c) for c in r[:keys]) for r in self.rows]
        label = " / ".join(self.headers[:keys])
        return Table.of([label, *heads], [[h, *(r[i] for r in self.rows)] for i, h in
                                          enumerate(self.headers) if i >= keys],
                        ("left",) + ("right",) * len(self.rows))

    def html(self) -> str:
        head = "".join(f"<th>{_html.escape(h)}</th>" for h in self.headers)
        right = [bool(self.align) and self.align[i] == "right" for i in range(len(self.headers))]
        body = "".join("<tr>" + "".join(
            ('<td class="n">' if right[i] else "<td>") + _html.escape(str(c)) + "</td>"
            for i, c in enumerate(r)) + "</tr>\n" for r in self.rows)
        return f"<table><thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>\n"


def num(x, fmt: str, unit: str = "", scale: float = 1.0) -> str:
    """A number as text ('-' for none or not finite), optionally scaled and with a unit."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x * scale if scale != 1.0 else x:{fmt}}{unit}"


def numeric_frame(records: list[dict], fmt: str) -> str:
    """Numeric rows (collect.rows) as CSV or JSON records, columns in the first row's order."""
    import pandas as pd
    df = pd.DataFrame(records, columns=list(records[0].keys()) if records else None)
    if fmt == "csv":
        return df.to_csv(index=False, lineterminator="\n")
    if fmt == "json":
        return df.to_json(orient="records", indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r} (csv, json)")


def notes(lines, prefix: str = "> ", width: int | None = None) -> str:
    """Notes under a markdown table, one quoted line each (wrapped at `width`, continued '> ')."""
    return "".join(f"\n{wrap(prefix + n, width, '> ' if prefix.startswith('>') else '  ')}" for n in lines)


def wrap(text: str, width: int | None, indent: str = "  ") -> str:
    """A line wrapped at `width` columns (None: as it is), continuation lines indented."""
    if width is None or len(text) <= width:
        return text
    import textwrap
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)


def widest(text: str) -> int:
    """The longest line of a text, in characters."""
    return max((len(line) for line in text.splitlines()), default=0)
