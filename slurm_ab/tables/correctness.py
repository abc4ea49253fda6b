"""The correctness gate's table: each launch's canary against the reference mode's (summary.md and
the CLI's printout; records from collect.correctness)."""
from __future__ import annotations

from .table import DASH, Table


def correctness_table(launches) -> Table | None:
    """One row per launch with a canary: its answers' exact-match rate and shortest common prefix
    with the reference, the prompts that failed, and its verdict (None when no launch had one)."""
    rows = []
    for la in launches:
        c = la.correctness
        if c is None:
            continue
        bad = sorted({ch.prompt for ch in c.checks if ch.problem})
        targets = len({ch.target for ch in c.checks})
        rows.append([str(la.launch), la.mode, str(targets), DASH if c.exact_match is None else f"{c.exact_match:.0%}",
                     DASH if c.min_common_prefix is None else f"{c.min_common_prefix}/{max((ch.tokens for ch in c.checks), default=0)}",
                     ", ".join(map(str, bad)) or DASH, c.verdict])
    if not rows:
        return None
    return Table.of(["launch", "mode", "servers", "exact match", "min common prefix", "prompts failing", "correctness"],
                    rows, ["right", "left", "right", "right", "right", "left", "left"])


def correctness_md(launches) -> str:
    """The section of summary.md ("" without a canary): the table, the reference and thresholds,
    and the reasons of every invalid launch."""
    t = correctness_table(launches)
    if t is None:
        return ""
    first = next(la.correctness for la in launches if la.correctness is not None)
    th = dict(first.thresholds)
    out = ["## Correctness (canary at temperature 0)", "", t.md(), "",
           f"reference: {first.reference}; {first.prompts} prompt(s); a prompt diverged when its common prefix "
           f"is below {th.get('min_common_prefix', '?'):g} tokens; a launch needs "
           f"{th.get('min_exact_match', 0):.0%} exact answers (docs/metrics.md \"Correctness\")"]
    for la in launches:
        if la.correctness is not None and la.correctness.verdict == "invalid":
            out += [f"- launch {la.launch} {la.mode}: {r}" for r in la.correctness.reasons]
    return "\n".join(out) + "\n"
