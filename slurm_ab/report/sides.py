"""What a comparison or history page shows of a run *or* a campaign: its verdict, its per-request
latencies at one concurrency, its throughput/interactivity points, and its settings.

A single run's summary.json carries a verdict and its bench.jsonl the per-request details; a
campaign's summary.json carries passes and aggregates, and the details sit in each launch's
bench-<pass>.jsonl. Reading both the same way here is what keeps a campaign side from showing as
'not collected' with no CDF on a compare page.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..model.rundir import Layout, read_manifest

# What a settings table shows besides each role's merged server flags (Experiment.role_flags).
BENCH_KEYS = ("dataset", "input_len", "output_len", "concurrency", "num_prompts", "backend")


def read_summary(run_dir: Path) -> dict:
    try:
        d = json.loads(Layout(run_dir).summary("summary.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def campaign_verdict(passes: list[dict]) -> str:
    """ok when every timed pass is, failed when none is, else invalid; 'not collected' without."""
    if not passes:
        return "not collected"
    ok = sum(1 for r in passes if r.get("verdict") == "ok")
    return "ok" if ok == len(passes) else ("failed" if not ok else "invalid")


def settings_of(exp) -> dict:
    """One mode's settings for a side-by-side table: per role its parallelism and every merged
    server flag (named "decode --dp-size" when the mode has several roles), the benchmark, the
    model (a typed Experiment, as manifests read back)."""
    if exp is None:
        return {}
    out: dict = {}
    roles = exp.mode.roles
    for r in roles:
        pre = f"{r.name} " if len(roles) > 1 else ""
        out.update({f"{pre}tp": r.tp, f"{pre}pp": r.pp, f"{pre}ep": r.ep,
                    f"{pre}{'instances' if pre else 'replicas'} x nodes": f"{r.instances} x {r.nodes}"})
        out.update({f"{pre}--{k}": v for k, v in exp.role_flags(r.name)})
    bench = exp.benchmark
    out.update({f"benchmark.{k}": getattr(bench, k) for k in BENCH_KEYS if getattr(bench, k, None) is not None})
    out["model"] = getattr(exp.paths, "model", None)
    return out


def mode_settings(run_dir: Path) -> dict[str, dict]:
    """mode -> settings: each launch of a campaign (its own manifest), else the run's."""
    run_dir = Path(run_dir)
    root = read_manifest(run_dir)
    out: dict[str, dict] = {}
    if root is not None and root.campaign is not None:
        passes = read_summary(run_dir).get("passes") or []
        for d in sorted(run_dir.glob("launch*")):
            m = read_manifest(d)
            if m is not None and m.mode and m.mode not in out:
                st = settings_of(m.config)
                mine = [r for r in passes if r.get("mode") == m.mode]
                if mine:        # a sweep's concurrencies and per-pass prompts, not the first mode's default
                    st["benchmark.concurrency"] = ", ".join(map(str, sorted({int(r["concurrency"]) for r in mine})))
                    st["benchmark.num_prompts"] = ", ".join(map(str, sorted({int(r["prompts"]) for r in mine
                                                                             if r.get("prompts")}))) or None
                out[m.mode] = st
        return out
    if root is not None:
        out[root.mode or run_dir.name] = settings_of(root.config)
    return out


@dataclass(frozen=True)
class Side:
    """One side of a page: a run or a campaign."""
    run_dir: Path
    name: str
    summary: dict = field(default_factory=dict)
    campaign: bool = False

    @property
    def run_id(self) -> str:
        return self.summary.get("run_id") or self.run_dir.name

    @property
    def verdict(self) -> str:
        if self.campaign:
            return campaign_verdict(self.summary.get("passes") or [])
        return self.summary.get("verdict") or "not collected"

    @property
    def modes(self) -> list[str]:
        if self.campaign:
            return list(((self.summary.get("campaign") or {}).get("modes")) or [])
        return [self.summary.get("mode") or "?"]

    @property
    def concurrencies(self) -> list[int]:
        if self.campaign:
            return sorted({int(r["concurrency"]) for r in self.summary.get("passes") or []})
        c = (self.summary.get("spec") or {}).get("max_concurrency")
        return [int(c)] if c else []

    def curve(self, concurrency: int | None = None, label: str | None = None) -> dict | None:
        """Per-request latency CDF data at one concurrency: the run's, or the campaign's ok passes
        pooled (its only mode, else the first)."""
        from .rundata import load
        if not self.campaign:
            return run_curve(load(self.run_dir), label or self.name)
        curves = pooled_curves(self.run_dir, self.summary, concurrency=concurrency,
                               mode=self.modes[0] if self.modes else None)
        if not curves:
            return None
        return dict(curves[0], label=f"{label or self.name}: {curves[0]['label']}")

    def interactivity_rows(self, gpus: int | None) -> list[dict]:
        """Rows for series.interactivity_points: the run's numbers, or each (mode, C) aggregate."""
        if not self.campaign:
            b = self.summary.get("bench") or {}
            return [{"label": self.name, "concurrency": (self.concurrencies or [None])[0],
                     "output_tps": b.get("output_tps"), "tpot_ms": (b.get("tpot") or {}).get("mean"),
                     "gpus": gpus, "verdict": self.verdict}]
        return [{"label": a["mode"], "concurrency": a["concurrency"], "gpus": gpus,
                 "output_tps": ((a.get("metrics") or {}).get("output_tps") or {}).get("mean"),
                 "tpot_ms": ((a.get("metrics") or {}).get("tpot_mean_ms") or {}).get("mean"),
                 "verdict": "ok" if a.get("passes_ok") == a.get("passes") else "invalid"}
                for a in self.summary.get("aggregates") or []]


def run_curve(run, label: str | None = None) -> dict:
    """One run's per-request CDF data: TTFT, E2E, TPOT per request, every ITL (ms), with the
    summary's p50/p95 (ITL's computed here, the same linear percentile) and benchmark.slo."""
    from ..parse.stats import percentile
    from . import series

    lat = series.request_latencies(run.record)
    bench = run.summary.get("bench") or {}
    dec = series.tpot_itl(run.record)
    return {"label": label or run.mode, "ttft": series.cdf_points(lat["ttft"]),
            "e2e": series.cdf_points(lat["e2e"]), "ttft_p": bench.get("ttft") or {},
            "e2e_p": bench.get("e2e") or {}, "tpot": series.cdf_points(dec["tpot"]),
            "tpot_p": bench.get("tpot") or {}, "itl": series.cdf_points(dec["itl"]),
            "itl_p": {q: percentile(sorted(dec["itl"]), n) for q, n in (("p50", 50), ("p95", 95))}
            if dec["itl"] else {}, "slo": (bench.get("goodput") or {}).get("slo_ms") or {}}


def pass_key(row: dict) -> str:
    return f"c{row['concurrency']}-r{row['repeat']}"


def launch_dir(run_dir: Path, summary: dict, launch: int) -> Path | None:
    for la in summary.get("launches") or []:
        if la.get("launch") == launch:
            return run_dir / la["dir"]
    return None


def pooled_curves(run_dir: Path, summary: dict, *, concurrency: int | None = None,
                  mode: str | None = None) -> list[dict]:
    """Per (mode, concurrency) of a campaign: the per-request latencies of its ok passes pooled
    (TTFT, E2E, TPOT per request, every ITL), with pooled p50/p95 (the same linear percentile as
    the tables) for the CDF markers; only one concurrency / mode when given."""
    from ..parse.bench import read_last_record
    from ..parse.stats import percentile
    from . import series

    groups: dict = {}
    keys = ("ttft", "e2e", "tpot", "itl")
    for row in summary.get("passes") or []:
        if row.get("verdict") != "ok" or (concurrency is not None and int(row["concurrency"]) != concurrency) \
                or (mode is not None and row.get("mode") != mode):
            continue
        d = launch_dir(Path(run_dir), summary, row.get("launch"))
        if d is None:
            continue
        rec = read_last_record(Layout(d).pass_bench(pass_key(row))).record
        lat, dec = series.request_latencies(rec), series.tpot_itl(rec)
        g = groups.setdefault((row["mode"], int(row["concurrency"])), {**{k: [] for k in keys}, "n": 0})
        for k in ("ttft", "e2e"):
            g[k] += lat[k]
        for k in ("tpot", "itl"):
            g[k] += dec[k]
        g["n"] += 1
    out = []
    for (m, c), g in groups.items():
        if not g["ttft"]:
            continue
        curve = {"label": f"{m} C={c} ({g['n']} passes)", "mode": m, "concurrency": c}
        for key in keys:
            xs = sorted(g[key])
            curve[key] = series.cdf_points(xs)
            curve[f"{key}_p"] = {"p50": percentile(xs, 50), "p95": percentile(xs, 95)} if xs else {}
        out.append(curve)
    return out


def load_side(run_dir, name: str | None = None) -> Side:
    run_dir = Path(run_dir)
    m = read_manifest(run_dir)
    summary = read_summary(run_dir)
    campaign = (m is not None and m.campaign is not None) or "passes" in summary
    return Side(run_dir, name or summary.get("run_id") or run_dir.name, summary, campaign)


def gpus_of(run_dir) -> int | None:
    """GPUs the run held: every role instance's nodes x GPUs per node."""
    m = read_manifest(Path(run_dir))
    return m.config.gpus if m is not None and m.config is not None else None


def settings_table(sides: dict[str, dict]) -> str:
    """The settings of each side or mode side by side (HTML), what differs first, highlighted."""
    from html import escape

    from .series import config_diff
    rows = config_diff(sides)
    if not rows:
        return ""
    hl = ' class="hl"'
    head = "".join(f"<th>{escape(str(n))}</th>" for n in sides)
    body = "".join(f"<tr{hl if differs else ''}><td><code>{escape(k)}</code></td>"
                   + "".join(f"<td>{escape('-' if v is None else str(v))}</td>" for v in vals) + "</tr>\n"
                   for k, vals, differs in rows)
    n = sum(1 for r in rows if r[2])
    return (f'<p class="muted">{n} of {len(rows)} settings differ (highlighted, listed first).</p>\n'
            f'<table class="settings"><thead><tr><th>setting</th>{head}</tr></thead>\n<tbody>\n{body}'
            "</tbody></table>\n")
