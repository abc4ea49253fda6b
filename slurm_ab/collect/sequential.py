"""A sequential campaign's looks, recomputed from the raw files and checked against the job's.

The job logs every look (``sequential_look`` in the campaign's events.log) and its stop
(``sequential_stop``). The collector rebuilds the spec from the manifest's campaign
(ab_stats.sequential.job_spec: the same launches, files and boundaries the job was rendered
with), runs the same stop rule (ab_stats.looks) over the clients' own pass files, and says for
every look whether its text equals the job's. The campaign's answer is the last look's decision
with its repeated confidence interval (the interval at that look's level), not a fixed-design
interval, which would not be valid after looking.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ..ab_stats import looks
from ..ab_stats.family import Row
from ..ab_stats.sequential import job_spec
from ..ab_stats.verdicts import BETTER, SAME, WORSE, equivalent
from ..model.campaign import Campaign
from ..parse.events import EventLog


@dataclass(frozen=True)
class Look:
    look: int
    job: str                        # the fields the job logged (key=value ...), "" when it logged none
    recomputed: str                 # the same fields recomputed from the raw files
    decision: str

    @property
    def agrees(self) -> bool:
        return self.job == self.recomputed


@dataclass(frozen=True)
class SequentialRecord:
    blocks: int                     # at most
    looks: tuple[Look, ...]
    stopped_at: Optional[int]       # the look that stopped the campaign (None: ran to its end)
    decision: str                   # better / worse / equivalent / no significant difference / continue
    verdict: str                    # in the verdict vocabulary (ab_stats.verdicts)
    low_pct: Optional[float]        # the deciding look's repeated confidence interval
    high_pct: Optional[float]
    estimate_pct: Optional[float]
    nominal: Optional[float]        # its two-sided level
    agree: bool                     # every look the job logged equals its recomputation
    spending: str = ""              # the alpha-spending function of its boundaries (benchmark.spending)
    prior: str = ""                 # where its prior came from (--prior-from; "" none)
    prior_uses: tuple[str, ...] = ()  # per look: used / dropped (the guard) / - (no estimate)


def _verdict(decision: str, margin: float) -> str:
    return {"better": BETTER, "worse": WORSE, "equivalent": equivalent(margin)}.get(decision, SAME)


def recompute(run_dir: Path, campaign: Campaign, events: EventLog) -> Optional[SequentialRecord]:
    """The looks of a sequential campaign (None for any other): the job's against their
    recomputation, and the answer."""
    if not campaign.sequential or len(campaign.modes) != 2 or not campaign.blocks:
        return None
    spec = job_spec(campaign)
    logged = {e.get_int("look"): " ".join(f"{k}={v}" for k, v in e.fields.items())
              for e in events.named("sequential_look") if e.get_int("look") is not None}
    stop = next(iter(events.named("sequential_stop")), None)
    last = max(logged, default=0)
    ended = {e.get_int("launch") for e in events.named("launch_end")}
    out, final, uses = [], None, []
    for k in range(1, len(spec["blocks"]) + 1):
        # past the job's last look: only the one it would take next, after a block every launch
        # of which ended (a job that ended inside a block, failed or cancelled, took no look there)
        if k > last and (stop is not None or k > last + 1 or not set(spec["blocks"][k - 1]) <= ended):
            break
        r = looks.look(spec, k, str(run_dir))
        text = " ".join(looks.fields(r))
        out.append(Look(k, logged.get(k, ""), text, str(r["decision"])))
        uses.append(str(r.get("prior", "")))
        final = r
        if r["decision"] not in (looks.CONTINUE,) and k >= last:
            break
    prior = campaign.prior.source if campaign.prior else ""
    if final is None:
        return SequentialRecord(len(spec["blocks"]), (), None, looks.CONTINUE, SAME, None, None, None, None, True,
                                spec["spending"], prior)
    stopped = stop.get_int("look") if stop is not None else None
    decision = str(final["decision"])
    nominal = spec["nominal"][final["look"] - 1]
    return SequentialRecord(len(spec["blocks"]), tuple(out), stopped, decision,
                            _verdict(decision, campaign.margin_pct), final.get("low_pct"), final.get("high_pct"),
                            final.get("estimate_pct"), nominal, all(x.agrees for x in out if x.job), spec["spending"],
                            prior, tuple(uses) if prior else ())


def primary_row(row: Row, seq: SequentialRecord) -> Row:
    """The comparison's primary row restated by the sequential answer: its verdict, the deciding
    look's repeated interval and level (no fixed-design p-value: it would not be valid after
    looking). Unchanged when no look could be computed."""
    if seq.low_pct is None:
        return row
    d = replace(row.delta, verdict=seq.verdict, ci_low_pct=seq.low_pct, ci_high_pct=seq.high_pct,
                confidence=1.0 - (seq.nominal or 0.05), p_value=None)
    return Row(d, row.role, seq.verdict, None, 1)
