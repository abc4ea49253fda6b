"""Which /metrics scrapes belong to the benchmark window, whose they are, and which round.

The job (functions.sh, scrape_metrics) scrapes every target at once at bench_start (round
"start"), every metrics.interval_s during the benchmark (rounds 1, 2, ...) and after bench_end
(round "end"); one ``metrics_scrape target=.. phase=.. round=.. node=.. ok=1|0 file=..`` line per
scrape. Targets: ``r<G>n<R>`` (replica G's node rank R), ``router``; jobs of earlier slurm-ab
versions scraped only each head, as ``r<G>`` (= node rank 0) and may have written no round (then
the k-th 'during' scrape of a target is its round k). Scrapes of one round are paired by that
field, never by position: a failed scrape shifts positions, not rounds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..parse.events import Event, EventLog
from ..parse.prometheus import Scrape, ScrapeError, read_scrape

_TARGET = re.compile(r"^r(\d+)(?:n(\d+))?$")


@dataclass(frozen=True)
class ScrapeRef:
    target: str                 # r<G>n<R> | r<G> (older jobs: the head) | router
    phase: str                  # start | during | end
    epoch: float
    local: str | None
    ok: bool
    file: str | None            # run-dir relative
    detail: str = ""            # http status / curl status of a failed scrape
    round: str = ""             # start | 1, 2, ... | end
    node: str = ""              # the host scraped (newer jobs)

    @property
    def replica(self) -> int | None:
        m = _TARGET.match(self.target)
        return int(m.group(1)) if m else None

    @property
    def rank(self) -> int | None:
        """Node rank within the replica (0 for an old head-only target)."""
        m = _TARGET.match(self.target)
        return (int(m.group(2)) if m.group(2) is not None else 0) if m else None

    @property
    def when(self) -> str:
        return self.local or f"{self.epoch:.3f}"


def window_scrapes(events: EventLog) -> dict[str, list[ScrapeRef]]:
    """target -> scrapes of the last benchmark pass (after the last bench_start, up to and
    including the target's first phase=end scrape), in order, each with its round."""
    starts = [e for e in events.events if e.name == "bench_start"]
    if not starts:
        return {}
    line0 = starts[-1].line
    out: dict[str, list[ScrapeRef]] = {}
    ended: set[str] = set()
    for e in events.events:
        if e.line <= line0 or e.name != "metrics_scrape":
            continue
        ref = _ref(e, out)
        if ref.target in ended:
            continue
        out.setdefault(ref.target, []).append(ref)
        if ref.phase == "end":
            ended.add(ref.target)
    return out


def _ref(e: Event, seen: dict[str, list[ScrapeRef]]) -> ScrapeRef:
    f = e.fields
    target, phase = f.get("target", "?"), f.get("phase", "during")
    detail = ", ".join(f"{k} {f[k]}" for k in ("http", "curl_rc") if f.get(k))
    rnd = f.get("round") or (phase if phase in ("start", "end") else
                             str(1 + sum(1 for r in seen.get(target, ()) if r.phase == "during")))
    return ScrapeRef(target, phase, e.epoch,
                     e.local.isoformat(sep=" ", timespec="milliseconds") if e.local else None,
                     f.get("ok") == "1", f.get("file") or None, detail, rnd, f.get("node", ""))


def by_replica(refs: dict[str, list[ScrapeRef]]) -> dict[int, dict[int, list[ScrapeRef]]]:
    """replica -> node rank -> its scrapes (an old 'r<G>' target is node rank 0)."""
    out: dict[int, dict[int, list[ScrapeRef]]] = {}
    for target, rs in refs.items():
        if rs and rs[0].replica is not None:
            out.setdefault(rs[0].replica, {}).setdefault(rs[0].rank, []).extend(rs)
    return out


def load(run_dir: Path, refs: Sequence[ScrapeRef], problems: list[str], who: str
         ) -> list[tuple[ScrapeRef, Scrape]]:
    """The usable scrapes among refs, parsed (unreadable ones become a problem line)."""
    out = []
    for ref in refs:
        if not ref.ok or not ref.file:
            continue
        try:
            out.append((ref, read_scrape(run_dir / ref.file)))
        except (OSError, ScrapeError) as e:
            problems.append(f"{who}: scrape {ref.file} unreadable ({e})")
    return out


def round_order(rounds) -> list[str]:
    """start, 1, 2, ..., end (unknown names after the numbers, in name order)."""
    def key(r: str):
        if r == "start":
            return (0, 0, "")
        if r == "end":
            return (3, 0, "")
        return (1, int(r), "") if r.isdigit() else (2, 0, r)
    return sorted(set(rounds), key=key)
