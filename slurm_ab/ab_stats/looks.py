"""One look of a sequential campaign: the launch-level test after a block, and its decision.

Standard library only, no import of slurm_ab: the job writes this file next to its spec
(sequential.json) and runs it with the client's Python after every counterbalanced block
(``python3 stoprule.py SPEC LOOK``), and the collector imports it to recompute every look from
the same raw files (the two must agree: docs/statistics.md, "Sequential campaigns").

A pass's value is the client's own figure of the primary metric: for output throughput the
steady-state block the client prints (SGLang 0.5.23's steady_state_serving), else the makespan
figure of its result file. A launch's value is the mean of the logs of its passes; the launch
means of both modes are regressed on mode and run position (least squares: a linear drift over
the job leaves the residual, counterbalanced blocks keep mode and position orthogonal), and the
mode coefficient's t interval at the look's critical value (spec["critical"][look - 1][df - 1],
computed by slurm_ab at render time: ab_stats/sequential.py) decides: better/worse when it
excludes 0, equivalent when it lies inside (-margin, +margin), else go on; at the last look
'no significant difference'.

With a prior (spec["prior"]: a pilot's launch-mean variance at this campaign's passes per launch
and its degrees of freedom, --prior-from), the look's residual variance is pooled with it
(df_prior s0^2 + df s^2) / (df_prior + df), t with df_prior + df degrees of freedom, so the first
look, which has 1 degree of freedom of its own, can decide. A one-sided F test guards it: when the
look's own variance exceeds the prior's beyond spec["prior"]["f_upper"][df - 1] (the F quantile,
computed at render time) the prior is dropped at that look and the look uses its own variance
alone (field prior=dropped); a look's variance below the prior's keeps it (pooling then only
widens the interval).
"""
from __future__ import annotations

import json
import math
import re
import sys

CONTINUE, STOP_DECISIONS = "continue", ("better", "worse", "equivalent")
MAX_DECISION = "no significant difference"
# primary metric -> (key of the client's result file, factor to the table's unit)
RECORD_KEYS = {"output_tps": ("output_throughput", 1.0), "steady_output_tps": ("output_throughput", 1.0),
               "ttft_mean_s": ("mean_ttft_ms", 1e-3), "tpot_mean_ms": ("mean_tpot_ms", 1.0),
               "e2e_mean_s": ("mean_e2e_latency_ms", 1e-3), "accept_len": ("accept_length", 1.0)}
THROUGHPUT = ("output_tps", "steady_output_tps")
_STEADY = re.compile(r"=+\s*Steady-State Result\s*=+")
_OUTPUT = re.compile(r"^Output token throughput \(tok/s\):\s+(\S+)\s*$")


def last_record(path: str):
    """The last line of a JSONL file that parses as a JSON object (None: none)."""
    rec = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    rec = obj
    except OSError:
        return None
    return rec


def steady_output(path: str):
    """The output throughput of the last steady-state block the client printed (None: none)."""
    value, inside = None, False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if _STEADY.fullmatch(line):
                    inside = True
                    continue
                m = _OUTPUT.match(line) if inside else None
                if m:
                    try:
                        value = float(m.group(1))
                    except ValueError:
                        pass
                    inside = False
    except OSError:
        return None
    return value


def _positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def pass_value(metric: str, bench: str, client_log: str):
    """(value, source) of one pass from the client's files; (None, why) without one."""
    if metric in THROUGHPUT:
        v = steady_output(client_log)
        if _positive(v):
            return float(v), "steady"
    rec = last_record(bench)
    if rec is None:
        return None, "no result"
    key, factor = RECORD_KEYS[metric]
    v = rec.get(key)
    if not _positive(v):
        return None, f"no {key}"
    return float(v) * factor, "record"


def _solve(a, b):
    """x with a x = b (Gaussian elimination with partial pivoting); None when singular."""
    n = len(b)
    m = [list(r) + [v] for r, v in zip(a, b)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-12:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def mode_fit(units):
    """Least squares of launch values on (1, is B, run position): (estimate, residual variance,
    df, (X'X)^-1 entry) of the mode coefficient (se = sqrt(variance x entry); the residual variance
    is what a prior is pooled with); None when it cannot be estimated (fewer than 2 launches a
    side, no residual degrees of freedom). `units`: [(position, is_b, value)]."""
    n = len(units)
    nb = sum(1 for _, b, _ in units if b)
    if nb < 2 or n - nb < 2 or n < 4:
        return None
    xs = [(1.0, 1.0 if b else 0.0, float(p)) for p, b, _ in units]
    ys = [y for _, _, y in units]
    xtx = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    beta = _solve(xtx, [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(3)])
    inv1 = _solve(xtx, [0.0, 1.0, 0.0])
    if beta is None or inv1 is None:
        return None
    rss = sum((y - sum(bi * xi for bi, xi in zip(beta, x))) ** 2 for x, y in zip(xs, ys))
    df = n - 3
    return beta[1], max(rss, 0.0) / df, df, inv1[1]


def pooled(fit, prior):
    """(estimate, se, df, use) of the mode coefficient with the prior's variance pooled in:
    use 'used' (df_prior + df degrees of freedom), 'dropped' (the look's own variance exceeds the
    prior's at the guard's F quantile: its own se and df) or '-' (no prior). `fit`: mode_fit's."""
    est, s2, df, inv = fit
    if not prior:
        return est, math.sqrt(s2 * inv), df, "-"
    v0, df0 = float(prior["variance"]), int(prior["df"])
    f_upper = prior["f_upper"]
    if v0 <= 0 or df0 < 1 or s2 / v0 > f_upper[min(df, len(f_upper)) - 1]:
        return est, math.sqrt(s2 * inv), df, "dropped"
    return est, math.sqrt((df0 * v0 + df * s2) / (df0 + df) * inv), df0 + df, "used"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def look(spec: dict, k: int, root: str = ".") -> dict:
    """Look k (1-based) over the first k blocks of the campaign in `spec`, reading the pass files
    under `root` (the run directory). Returns the look's fields, decision included."""
    metric, log = spec["metric"], spec.get("log", True)
    blocks = spec["blocks"][:k]
    launches = {x["index"]: x for x in spec["launches"]}
    units, passes, missing = [], 0, []
    for idx in (i for blk in blocks for i in blk):
        la = launches[idx]
        vals = []
        for p in la["passes"]:
            v, why = pass_value(metric, f"{root}/{la['dir']}/{p['bench']}", f"{root}/{la['dir']}/{p['client_log']}")
            if v is None:
                missing.append(f"{idx}:{p['key']}")
            else:
                vals.append(math.log(v) if log else v)
        if vals:
            passes += len(vals)
            units.append((idx, la["mode"] == spec["b"], sum(vals) / len(vals)))
    out = {"look": k, "blocks": len(blocks), "of": len(spec["blocks"]), "passes": passes,
           "missing": ",".join(missing) or "-"}
    out.update(decide(units, k, spec))
    return out


def decide(units, k: int, spec: dict) -> dict:
    """The test and decision of look k over launch values `units` [(position, is_b, value)]
    (spec: critical, blocks, margin_pct, better, log, scale, prior)."""
    out = {"launches_a": sum(1 for u in units if not u[1]), "launches_b": sum(1 for u in units if u[1])}
    prior = spec.get("prior")
    fit = mode_fit(units)
    if fit is not None:
        fit = pooled(fit, prior)
        if prior:
            out["prior"] = fit[3]
    last = k >= len(spec["blocks"])
    if fit is None or fit[1] <= 0:
        out.update(estimate_pct=None, low_pct=None, high_pct=None, se=None, df=None if fit is None else fit[2],
                   crit=None, decision=MAX_DECISION if last else CONTINUE,
                   note="no_estimate" if fit is None else "no_spread")
        if prior and fit is None:
            out["prior"] = "-"
        return out
    est, se, df, _ = fit
    row = spec["critical"][k - 1]
    crit = row[min(df, len(row)) - 1]
    lo, hi = est - crit * se, est + crit * se
    if spec.get("log", True):
        low, high, centre = (math.expm1(min(x, 700.0)) * 100.0 for x in (lo, hi, est))
    else:
        f = spec.get("scale", 100.0)
        low, high, centre = lo * f, hi * f, est * f
    higher = spec.get("better", "higher") == "higher"
    margin = spec.get("margin_pct") or 0.0
    if low > 0:
        decision = "better" if higher else "worse"
    elif high < 0:
        decision = "worse" if higher else "better"
    elif margin and -margin < low and high < margin:
        decision = "equivalent"
    else:
        decision = MAX_DECISION if last else CONTINUE
    out.update(estimate_pct=centre, low_pct=low, high_pct=high, se=se, df=df, crit=crit, decision=decision,
               note="-")
    return out


def fields(result: dict) -> list[str]:
    """The look as events.log fields (key=value, no spaces), the same text in the job and the
    collector."""
    order = ("look", "blocks", "of", "launches_a", "launches_b", "passes", "estimate_pct", "low_pct",
             "high_pct", "se", "df", "crit", "decision", "missing", "note")
    out = []
    # a campaign with a prior says at every look whether it was pooled (used / dropped / -)
    for key in order + (("prior",) if "prior" in result else ()):
        v = result.get(key)
        text = _fmt(v) if isinstance(v, float) else ("-" if v is None else str(v))
        out.append(f"{key}={text.replace(' ', '_')}")
    return out


def main(argv=None) -> int:
    """PROGRAM SPEC LOOK [ROOT]: print the look's fields on one line (the job logs them)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print(f"usage: {sys.argv[0]} SPEC LOOK [ROOT]", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    root = argv[2] if len(argv) > 2 else "."
    print(" ".join(fields(look(spec, int(argv[1]), root))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
