"""Open-loop passes' load: offered against achieved arrival rate, the rate served, the backlog's
growth and the saturated mark (summary.md; records from collect.load)."""
from __future__ import annotations

from .table import DASH, Table, num


def load_table(passes) -> Table | None:
    """One row per open-loop pass (None without any)."""
    rows = []
    for p in passes:
        ld = p.load
        if ld is None:
            continue
        rows.append([p.ref.mode or p.mode or DASH, p.ref.key or DASH, num(ld.offered_rps, "g"), num(ld.achieved_rps, ".2f"),
                     str(ld.arrivals), num(ld.served_rps, ".2f"),
                     DASH if ld.backlog_end is None else f"{ld.backlog_mid} -> {ld.backlog_end}",
                     DASH if ld.growth is None else f"{ld.growth:+.0%}",
                     "saturated" if ld.saturated else ("under-offered" if ld.under_offered else "kept up"),
                     p.verdict])
    if not rows:
        return None
    return Table.of(["mode", "pass", "offered req/s", "achieved req/s", "arrivals", "served req/s (2nd half)",
                     "in flight (mid -> end)", "growth / arrival rate", "load", "verdict"], rows,
                    ["left", "left", "right", "right", "right", "right", "right", "right", "left", "left"])


def load_md(passes) -> str:
    """The section of summary.md ("" without open-loop passes)."""
    t = load_table(passes)
    if t is None:
        return ""
    return ("## Open-loop load (arrivals in the servers' access logs; docs/metrics.md \"Open-loop load\")\n\n"
            + t.md() + "\n")
