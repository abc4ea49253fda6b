"""Open-loop passes' load: offered against achieved arrival rate, the rate served, the backlog's
growth, the servers' waiting queue over the arrivals and the saturated mark (summary.md; records
from collect.load)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .table import DASH, Table, num

if TYPE_CHECKING:
    from ..collect.rows import PassRow


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
                     DASH if ld.queue_last is None else f"{ld.queue} ({ld.queue_scrapes})",
                     ld.state, p.verdict])
    if not rows:
        return None
    return Table.of(["mode", "pass", "offered req/s", "achieved req/s", "arrivals", "served req/s (2nd half)",
                     "in flight (mid -> end)", "growth / arrival rate", "waiting queue before -> during (scrapes)",
                     "load", "verdict"], rows,
                    ["left", "left", *["right"] * 7, "left", "left"])


def load_md(passes) -> str:
    """The section of summary.md ("" without open-loop passes)."""
    t = load_table(passes)
    if t is None:
        return ""
    return ("## Open-loop load (arrivals in the servers' access logs; docs/metrics.md \"Open-loop load\")\n\n"
            + t.md() + "\n")


def cache_md(rows: "Sequence[PassRow]") -> str:
    """The prefix (radix) cache per (mode, load): the prompt tokens of the requests the servers
    finished in the passes' windows and the share their cache served (/metrics' prompt_tokens_total
    and cached_tokens_total, summed over replicas); "" when no pass has the counters."""
    groups: dict = {}
    for r in rows:
        prompt = r.value("prompt_tokens_window")
        if prompt is None or not r.ok:
            continue
        g = groups.setdefault((r.mode, r.concurrency, r.rate), [0.0, 0.0, 0])
        g[0] += prompt
        g[1] += r.value("cached_tokens_window") or 0.0
        g[2] += 1
    if not groups:
        return ""
    from ..collect.rows import load_label
    body = [[m, load_label(c, q), str(n), num(p, ".0f"), num(k, ".0f"), DASH if not p else f"{k / p:.1%}"]
            for (m, c, q), (p, k, n) in groups.items()]
    t = Table.of(["mode", "load", "ok passes", "prompt tokens", "cached tokens", "prefix cache hit"], body,
                 ["left", "left", "right", "right", "right", "right"])
    return ("## Prefix cache (/metrics: cached_tokens_total / prompt_tokens_total over the passes' windows)\n\n"
            + t.md() + "\n")
