"""A capacity search's tables: each launch's probes (rate, attainment, SGLang's goodput, saturated)
and its capacity, and the modes' capacities compared (summary.md; records from collect.capacity)."""
from __future__ import annotations

from ..collect.capacity import compare_capacity
from ..model.campaign import rate_text
from .table import DASH, Table, num


def capacity_md(launches) -> str:
    """The section of summary.md ("" without a capacity search)."""
    found = [la for la in launches if la.capacity is not None]
    if not found:
        return ""
    first = found[0].capacity
    slo = ", ".join(f"{k} <= {v:g} ms" for k, v in first.slo_ms.items())
    rows = []
    for la in found:
        c = la.capacity
        for p in c.probes:
            rows.append([la.mode, p.key, DASH if p.rate is None else rate_text(p.rate),
                         DASH if p.attainment is None else f"{p.attainment:.1%} ({p.good}/{p.sent})",
                         "met" if p.met else "not met", num(p.goodput_rps, ".2f"),
                         p.load or DASH])
    probes = Table.of(["mode", "probe", "rate (req/s)", "attainment", "target", "goodput (SGLang, good req/s)", "load"],
                      rows, ["left", "left", "right", "right", "left", "right", "left"])
    results = Table.of(["mode", "launch", "capacity (DistServe goodput)", "decisions"],
                       [[la.mode, str(la.launch), la.capacity.text,
                         "the job's = recomputed" if la.capacity.agrees else "DIFFER: " + "; ".join(la.capacity.notes)]
                        for la in found], ["left", "right", "left", "left"])
    out = [f"## Capacity: the highest rate at which {first.attainment:.0%} of the requests meet {slo}", "",
           results.md(), "", probes.md(), ""]
    for la in found[1:]:
        out.append(f"- {compare_capacity(first, la.capacity)}" if la.mode != found[0].mode else "")
    out.append(f"(bisection on [{first.lo:g}, {first.hi:g}] req/s; a probe's SGLang goodput is its good requests per "
               "second, DistServe's goodput the capacity; docs/campaigns.md \"Capacity\")")
    return "\n".join(x for x in out if x is not None) + "\n"
