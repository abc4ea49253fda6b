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


def notes(lines, prefix: str = "> ") -> str:
    """Notes under a markdown table, one quoted line each."""
    return "".join(f"\n{prefix}{n}" for n in lines)
