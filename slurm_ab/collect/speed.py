"""The slow-replica rule: a replica whose nodes decode slower makes a run invalid.

Two figures must agree before a run is called invalid for it, because either alone is wrong in
a known way:

- the server TPOT histogram of /metrics (mean over the window, per replica): what the user's
  latencies are made of, but per request, so it also holds the time a request's decode waited
  behind other requests' prefills. With long prompts and short outputs (16K in, 128-512 out, 8
  requests a replica) that wait is most of TPOT, and which replica's requests met more prefills
  is chance: healthy replicas differed by 1.5-1.9x on the local cluster;
- the decode lines of the node-0 log (one every decode-log-interval steps): gen throughput per
  running request over the interval since the previous line. Most intervals hold no prefill, so
  they measure the nodes' decode speed, with a spread that says what a difference is worth.

A replica is named when its mean TPOT is SPEED_RATIO times the fastest replica's AND its decode
lines are as much slower, the difference significant in a one-sided Welch test (scipy) at
SPEED_ALPHA. A TPOT gap the decode lines do not confirm, or cannot (too few lines), is a note,
not a verdict. Slow-node runs of the local cluster (tbf 4-8mbit on one node) showed 1.7-4.1x in
both; healthy passes up to 1.9x in TPOT and 1.03-1.26x in the decode lines.
"""
from __future__ import annotations

import math
from typing import Sequence

SPEED_RATIO = 1.5        # identical replicas of one job decode within a few % of each other
SPEED_MIN_REQUESTS = 3
LOG_RATIO = SPEED_RATIO  # decode-line speed: the slow replica's nodes, not its queueing
SPEED_ALPHA = 0.01
SPEED_MIN_LINES = 3      # per replica, in the window


def _nodes(r) -> str:
    return f" ({', '.join(r.nodes)})" if r.nodes else ""


def speed_findings(replicas, replica_metrics: Sequence) -> list[tuple[bool, str]]:
    """(confirmed, text) for every replica whose server TPOT is SPEED_RATIO times the fastest
    replica's of its role (PD: decodes against decodes)."""
    by_id = {r.replica: r for r in replicas}
    out = []
    for role in dict.fromkeys(r.role for r in replicas):
        out += _findings([m for m in replica_metrics
                          if getattr(by_id.get(m.replica), "role", None) == role], by_id)
    return out


def _findings(replica_metrics: Sequence, by_id: dict) -> list[tuple[bool, str]]:
    timed = [m for m in replica_metrics if m.tpot is not None and m.tpot.mean_ms
             and m.tpot.count >= SPEED_MIN_REQUESTS]
    if len(timed) < 2:
        return []
    fast = min(timed, key=lambda m: m.tpot.mean_ms)
    out = []
    for m in timed:
        ratio = m.tpot.mean_ms / fast.tpot.mean_ms
        if m is fast or ratio < SPEED_RATIO:
            continue
        r, rf = by_id.get(m.replica), by_id.get(fast.replica)
        name = r.name if r else f"replica {m.replica}"
        fname = rf.name if rf else f"replica {fast.replica}"
        p95 = "" if m.tpot.p95_bucket is None or fast.tpot.p95_bucket is None else \
            f", p95 in {m.tpot.bucket_text('p95')} vs {fast.tpot.bucket_text('p95')}"
        confirmed, logs = decode_lines_agree(r, rf)
        if confirmed:
            out.append((True, f"{name}{_nodes(r) if r else ''} decoded {ratio:.1f}x slower than "
                              f"{fname}: server TPOT mean {m.tpot.mean_ms:.1f} vs "
                              f"{fast.tpot.mean_ms:.1f} ms{p95} over {m.tpot.count:g} and "
                              f"{fast.tpot.count:g} requests ({m.tpot.metric}); {logs}; a slow "
                              f"node or link in {name}: the pooled latencies mix two speeds"))
        else:
            out.append((False, f"{name}'s server TPOT mean was {ratio:.1f}x {fname}'s "
                               f"({m.tpot.mean_ms:.1f} vs {fast.tpot.mean_ms:.1f} ms over "
                               f"{m.tpot.count:g} and {fast.tpot.count:g} requests), but {logs}: "
                               "not called a slow node (its requests may have waited behind more "
                               "prefills)"))
    return out


def decode_lines_agree(slow, fast) -> tuple[bool, str]:
    """(whether the decode lines show `slow` decoding LOG_RATIO times slower than `fast` beyond
    their spread, how that reads)."""
    n1, n2 = (getattr(x, "speed_samples", 0) or 0 for x in (slow, fast))
    if min(n1, n2) < SPEED_MIN_LINES or not slow.speed_mean or not fast.speed_mean:
        return False, (f"the decode logs hold too few decode lines in the window ({n1} and {n2}; "
                       f"{SPEED_MIN_LINES} each needed) to tell a slow node from queueing")
    ratio = fast.speed_mean / slow.speed_mean
    p = welch_greater(fast.speed_mean, fast.speed_sd or 0.0, n2, slow.speed_mean, slow.speed_sd or 0.0, n1)
    figures = (f"{slow.speed_mean:.3g} vs {fast.speed_mean:.3g} tokens/s per running request "
               f"({ratio:.2f}x) over {n1} and {n2} lines, one-sided Welch p = {p:.2g}")
    if ratio >= LOG_RATIO and p < SPEED_ALPHA:
        return True, f"decode lines {figures}"
    return False, (f"its decode lines show {figures} (a slow node shows {LOG_RATIO:g}x at "
                   f"p < {SPEED_ALPHA:g})")


def welch_greater(m1: float, s1: float, n1: int, m2: float, s2: float, n2: int) -> float:
    """p-value of Welch's t-test that mean 1 > mean 2 (scipy); with no spread at all, 0 or 1."""
    if s1 == 0 and s2 == 0:
        return 0.0 if m1 > m2 else 1.0
    from scipy.stats import ttest_ind_from_stats
    p = ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False, alternative="greater").pvalue
    return 1.0 if math.isnan(p) else float(p)
