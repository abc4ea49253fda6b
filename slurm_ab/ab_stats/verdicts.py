"""The verdict vocabulary of a comparison, in one place: the words, how an interval becomes one,
their qualifiers, and the kind (and colour) every table, page and plot shows them with.

An interval of the change (B against A, percent) says:

- ``better`` / ``worse``: it excludes 0 (the direction is the metric's: higher or lower is better);
- ``equivalent within ±M%``: it includes 0 and lies inside the equivalence margin (-M, +M)
  (benchmark.margin_pct, --margin): two one-sided tests against ±M at the interval's level, so
  "no change larger than M" is an answer a user can act on;
- ``no significant difference``: neither (too little data to tell; plan a larger design).

A real change inside the margin reads ``better``/``worse``: an interval that excludes 0 has found
a change, however small. Qualifiers say what the interval cannot hold: ``(within-launch only)``
(one server launch on a side: launch and mode confounded) and ``(separate jobs)`` (two jobs
compared: job and mode confounded, shown only when the user asks for verdicts across jobs).
Percentile rows are ``descriptive``: no test (docs/statistics.md, "Percentiles").
"""
from __future__ import annotations

from typing import Optional

HIGHER, LOWER = "higher", "lower"          # which direction of a metric is better

BETTER, WORSE, SAME = "better", "worse", "no significant difference"
EQUIVALENT = "equivalent"                  # printed "equivalent within ±M%"
INCONCLUSIVE = "inconclusive (n=1)"
NO_SPREAD = "inconclusive (no spread)"
DESCRIPTIVE = "descriptive"
WITHIN = "within-launch only"
ACROSS_JOBS = "separate jobs"
VERDICTS = (BETTER, WORSE, EQUIVALENT, SAME, INCONCLUSIVE, NO_SPREAD, DESCRIPTIVE)
PLAIN = (BETTER, WORSE)                    # a decision that something changed

# kind -> (what the kind means, colour): tables, pages, plots and the terminal take both from here
KINDS = {
    "better": ("B is better", "#2e7d32"),
    "worse": ("B is worse", "#c62828"),
    "equivalent": ("no change larger than the margin", "#1565c0"),
    "same": ("no significant difference: too little data to tell", "#616161"),
    "inconclusive": ("no interval could be given", "#9e9e9e"),
    "descriptive": ("shown, not tested", "#9e9e9e"),
}


def equivalent(margin_pct: float) -> str:
    """'equivalent within ±3%'."""
    return f"{EQUIVALENT} within ±{margin_pct:g}%"


def decide(low: float, high: float, better: str, margin_pct: Optional[float] = None) -> str:
    """The verdict of an interval of the change (percent): better / worse when it excludes 0,
    equivalent when it lies inside (-margin, +margin), else no significant difference."""
    if low > 0.0:
        return BETTER if better == HIGHER else WORSE
    if high < 0.0:
        return WORSE if better == HIGHER else BETTER
    if margin_pct and -margin_pct < low and high < margin_pct:
        return equivalent(margin_pct)
    return SAME


def qualify(verdict: str, qualifier: Optional[str]) -> str:
    """'worse (within-launch only)'; no qualifier: the verdict itself."""
    return f"{verdict} ({qualifier})" if qualifier else verdict


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
