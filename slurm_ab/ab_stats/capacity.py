"""The capacity search's decisions (issue 33 item 2): the highest request rate at which a share of
the requests (the attainment target) meets the latency SLOs, found by bisection over open-loop
passes within one launch; DistServe's goodput is that rate.

Standard library only: the job writes this file verbatim into the run directory and runs it after
each probe (``python3 capacity.py SPEC LAUNCH_DIR KEY`` prints the next probe's rate, from the
probes before KEY), so the job decides with what the collector uses to recompute the decisions
from the same files (collect.capacity): both must agree.

A request is good when it succeeded and met every SLO (SGLang 0.5.23 benchmark/goodput.py: TTFT,
TPOT = (E2E - TTFT) / (output - 1), E2E, each <= its SLO in ms); a probe meets the target when
good / sent >= attainment. Bisection on [lo, hi]: every probe at the middle of the current
bracket; a probe that meets the target raises the bracket's low end, one that does not lowers its
high end. After the probes: the capacity lies in [highest rate that met, lowest rate that did
not); an end never probed stays the search's bound (said: "at least hi", "below lo").
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DONE = "done"


def _details(path: Path) -> dict | None:
    """The last JSON record of a bench_serving --output-file (one JSON per line)."""
    last = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        last = json.loads(line)
                    except ValueError:
                        continue
    except OSError:
        return None
    return last


def attainment(record: dict | None, slo_ms: dict) -> tuple[int, int]:
    """(good, sent) of one probe's record (SGLang's goodput definitions)."""
    if not record or not isinstance(record.get("ttfts"), list):
        return 0, 0
    ttfts, itls = record["ttfts"], record.get("itls") or []
    outs, errs = record.get("output_lens") or [], record.get("errors") or []
    good = 0
    for i, ttft in enumerate(ttfts):
        err = errs[i] if i < len(errs) else ""
        n = outs[i] if i < len(outs) else None
        if err or n == 0 or not isinstance(ttft, (int, float)):
            continue
        gaps = [x for x in (itls[i] if i < len(itls) and isinstance(itls[i], list) else ())
                if isinstance(x, (int, float))]
        e2e = ttft + sum(gaps)
        n = n if isinstance(n, int) else len(gaps) + 1
        values = {"ttft": ttft, "e2el": e2e, "tpot": (e2e - ttft) / (n - 1) if n > 1 else 0.0}
        if all(values[k] * 1000.0 <= v for k, v in slo_ms.items() if k in values):
            good += 1
    return good, len(ttfts)


def bracket(spec: dict, probes: list[tuple[float, float]]) -> tuple[float, float]:
    """The search's bracket [low, high] after these (rate, attainment) probes."""
    lo, hi = float(spec["lo"]), float(spec["hi"])
    for rate, share in probes:
        if share >= spec["attainment"]:
            lo = max(lo, rate)
        else:
            hi = min(hi, rate)
    return lo, hi


def next_rate(spec: dict, probes: list[tuple[float, float]]) -> float | None:
    """The next probe's rate (the middle of the bracket), None once every probe has run."""
    if len(probes) >= int(spec["probes"]):
        return None
    lo, hi = bracket(spec, probes)
    return round((lo + hi) / 2, 6)


def probes_before(spec: dict, launch_dir: Path, key: str) -> list[tuple[float, float]]:
    """(rate, attainment) of the probes of a launch that ran before KEY, from their files."""
    out = []
    for p in spec["passes"]:
        if p["key"] == key:
            break
        rate = next_rate(spec, out)
        good, sent = attainment(_details(launch_dir / p["bench"]), spec["slo_ms"])
        out.append((rate, good / sent if sent else 0.0))
    return out


def text(rate: float) -> str:
    """A rate as the job passes it on (model.campaign.rate_text)."""
    return f"{rate:.6f}".rstrip("0").rstrip(".")


def main(argv: list[str]) -> int:
    """SPEC LAUNCH_DIR KEY -> prints KEY's rate (or 'done')."""
    spec = json.loads(Path(argv[0]).read_text())
    probes = probes_before(spec, Path(argv[1]), argv[2])
    for rate, share in probes:
        print(f"probe {text(rate)} req/s: attainment {share:.3f}", file=sys.stderr)
    rate = next_rate(spec, probes)
    print(DONE if rate is None else text(rate))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
