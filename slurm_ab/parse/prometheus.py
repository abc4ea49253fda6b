"""Prometheus text exposition (an SGLang server's or the router's /metrics) -> one Scrape.

Parsing is prometheus_client's own (``prometheus_client.parser``), imported lazily so the CLI
starts fast. A Scrape keeps every sample by its sample name (``sglang:generation_tokens_total``,
not the family name the parser derives by stripping ``_total``) with its labels, plus each
family's type. Scrapes are small (tens of KB), so a whole file is read at once.

SGLang serves /metrics through prometheus_client's multiprocess collector: a labeled counter has
NO sample until it is first incremented (e.g. ``sglang:spec_verify_calls_total`` before the first
request finishes), so a missing counter in an otherwise valid SGLang scrape means zero.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

__all__ = ["Sample", "Scrape", "ScrapeError", "parse_scrape", "read_scrape"]


class ScrapeError(ValueError):
    """The text is not Prometheus exposition format (an error page, a truncated file)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]      # sorted (key, value) pairs
    value: float

    def label(self, key: str, default: str | None = None) -> str | None:
        return dict(self.labels).get(key, default)


@dataclass(frozen=True)
class Scrape:
    samples: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)   # sample name ->
    types: Mapping[str, str] = field(default_factory=dict)                    # family name -> type

    def __contains__(self, name: str) -> bool:
        return name in self.samples

    def get(self, name: str, where: Callable[[Sample], bool] | None = None) -> tuple[Sample, ...]:
        out = self.samples.get(name, ())
        return tuple(s for s in out if where(s)) if where else out

    def total(self, name: str, where: Callable[[Sample], bool] | None = None) -> float | None:
        """Sum of the finite samples of ``name``; None when it has none."""
        vals = [s.value for s in self.get(name, where) if math.isfinite(s.value)]
        return sum(vals) if vals else None

    def prefixed(self, prefix: str) -> bool:
        return any(n.startswith(prefix) for n in self.samples)

    def label_values(self, key: str, names: Iterable[str] | None = None) -> set[str]:
        """Every value of label ``key`` over the given sample names (all when None)."""
        pick = self.samples if names is None else {n: self.samples.get(n, ()) for n in names}
        return {v for ss in pick.values() for s in ss if (v := s.label(key)) is not None}


@functools.lru_cache(maxsize=16)
def parse_scrape(text: str) -> Scrape:
    """Parse exposition text; raise ScrapeError when prometheus_client cannot read it. Kept per
    text: a run's idle nodes are scraped to the same text again and again (48 distinct of 135
    scrapes in a 40-prompt run), and prometheus_client's parser is most of collect's time. The
    repeats come in a row, so a few entries catch them (that run: 87 hits with 256 entries, 84
    with 8), and a parsed scrape weighs ~260 KB: a long watch or collect holds ~4 MB, not ~70."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[Sample]] = {}
    types: dict[str, str] = {}
    try:
        for fam in text_string_to_metric_families(text):
            types[fam.name] = fam.type
            for s in fam.samples:
                samples.setdefault(s.name, []).append(
                    Sample(s.name, tuple(sorted(s.labels.items())), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ScrapeError(f"not Prometheus text format: {e}") from None
    if not types and text.strip() and not all(
            ln.startswith("#") or not ln.strip() for ln in text.splitlines()):
        raise ScrapeError("no metric family found")
    return Scrape({k: tuple(v) for k, v in samples.items()}, types)


def read_scrape(path: str | Path) -> Scrape:
    """Parse one raw .prom file (read-only); ScrapeError/OSError on failure."""
    raw = Path(path).read_bytes()
    return parse_scrape(raw.decode("utf-8", errors="replace"))
