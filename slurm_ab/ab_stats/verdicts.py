"""The verdict vocabulary of a comparison as every table, page and plot shows it: one mapping of a
verdict (in any of its printed forms) to its kind and colour.

The words themselves come from ab_stats.launches (better, worse, no significant difference,
inconclusive); ``equivalent within ±M%`` is the form of an equivalence verdict (an interval inside
the margin). A qualifier (``(within-launch only)``, ``(separate jobs)``) or a margin never changes
the kind: "worse (within-launch only)" is drawn red like "worse". This module mirrors the API of
the verdict vocabulary of issue 30 (KINDS, base, kind, colour), which takes it over.
"""
from __future__ import annotations

from typing import Optional

from .launches import BETTER, INCONCLUSIVE, NO_SPREAD, SAME, WORSE

EQUIVALENT = "equivalent"                  # printed "equivalent within ±M%"
DESCRIPTIVE = "descriptive"

# kind -> (what the kind means, colour): tables, pages, plots and the terminal take both from here
KINDS = {
    "better": ("B is better", "#2e7d32"),
    "worse": ("B is worse", "#c62828"),
    "equivalent": ("no change larger than the margin", "#1565c0"),
    "same": ("no significant difference: too little data to tell", "#616161"),
    "inconclusive": ("no interval could be given", "#9e9e9e"),
    "descriptive": ("shown, not tested", "#9e9e9e"),
}


def base(verdict: Optional[str]) -> str:
    """The verdict without its qualifier and margin: 'better', 'equivalent', ..."""
    v = str(verdict or "")
    if v.startswith(EQUIVALENT):
        return EQUIVALENT
    for w in (INCONCLUSIVE, NO_SPREAD):
        if v.startswith(w):
            return w
    return v.split(" (")[0]


def kind(verdict: Optional[str]) -> str:
    """A key of KINDS: better, worse, equivalent, same, inconclusive, descriptive."""
    b = base(verdict)
    return {BETTER: "better", WORSE: "worse", EQUIVALENT: "equivalent", SAME: "same",
            DESCRIPTIVE: "descriptive"}.get(b, "inconclusive")


def colour(verdict: Optional[str]) -> str:
    return KINDS[kind(verdict)][1]
