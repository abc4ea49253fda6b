"""What a comparison or history page shows of a job: its verdict, its per-request latencies at
one concurrency (its ok passes pooled), its throughput/interactivity points, and its settings.

Every job is read the same way (a run of one mode is the campaign of one launch and one pass):
its summary.json read back into the collector's records, the passes' client outputs through
rundir.open_run, so a job of many passes and a job of one share every chart of a page.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..collect.records import CampaignSummary
from ..collect.rows import PassRow, aggregates, load_label, ok_rows, pass_rows
from ..collect.write import read_summary
from ..model.rundir import open_run, read_manifest

# What a settings table shows besides each role's merged server flags (Experiment.role_flags).
BENCH_KEYS = ("dataset", "input_len", "output_len", "concurrency", "num_prompts", "backend")


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
    # the software a launch ran with: what a mode's [modes.<M>.settings] may change
    ct = exp.container
    out["image"] = (ct.image or "(none)") if ct is not None else None
    if getattr(exp.paths, "draft_model", None) and any(exp.paths.draft_model == v for r in roles
                                                       for _, v in exp.role_flags(r.name)):
        out["draft model"] = exp.paths.draft_model
    out.update({f"env {k}": v for k, v in exp.env or ()})
    out.update({f"server.env {k}": v for k, v in exp.server_env or ()})
    if exp.client is not None and exp.client.profile:
        out["client"] = exp.client.profile
    if exp.router is not None and exp.router.profile:
        out["router"] = exp.router.profile
    return out


def ran_with(run_dir: Path, mode: str) -> dict:
    """The module versions a mode's launches ran with, as the preflight found them on its nodes: in
    the mode's own image when it had its own preflight (<node>@<mode>), else the job's."""
    from ..model.rundir import Layout
    from ..parse.preflight import ran_on, read_reports
    lay = Layout(Path(run_dir))
    reports = read_reports(lay.preflight_reports(mode)) or read_reports(lay.preflight_reports())
    return {f"module {m}": v for m, v in (ran_on(reports).get("modules") or {}).items()}


def mode_settings(run_dir: Path) -> dict[str, dict]:
    """mode -> settings, from each launch's manifest (its mode's resolved experiment); a mode's
    concurrencies and prompts per pass as its passes ran them (a sweep's, not the first mode's
    default)."""
    run = open_run(run_dir)
    job = read_summary(run_dir)
    out: dict[str, dict] = {}
    for la in run.campaign.launches:
        m = read_manifest(run.launch_layout(la).root)
        if m is None or la.mode in out:
            continue
        st = {**settings_of(m.config), **ran_with(run_dir, la.mode)}
        mine = [p.ref for p in (job.passes if job else ()) if p.ref.mode == la.mode]
        if mine:
            st["benchmark.concurrency"] = ", ".join(map(str, sorted({r.concurrency for r in mine})))
            st["benchmark.num_prompts"] = ", ".join(map(str, sorted({r.prompts for r in mine if r.prompts}))) or None
        out[la.mode] = st
    return out


@dataclass(frozen=True)
class Side:
    """One side of a page: a job, as collected (job None: not collected yet)."""
    run_dir: Path
    name: str
    job: CampaignSummary | None = None

    @property
    def run_id(self) -> str:
        return self.job.run_id if self.job else self.run_dir.name

    @property
    def verdict(self) -> str:
        return self.job.verdict if self.job else "not collected"

    @property
    def modes(self) -> list[str]:
        return list(self.job.campaign.modes) if self.job else []

    @property
    def passes(self) -> int:
        return len(self.job.passes) if self.job else 0

    @property
    def concurrencies(self) -> list[int]:
        return sorted({p.ref.concurrency for p in self.job.passes}) if self.job else []

    @property
    def slo_ms(self) -> dict:
        """benchmark.slo as its passes were judged ({} without)."""
        return next((p.bench.goodput.slo_ms for p in self.job.passes if p.bench.goodput), {}) if self.job else {}

    def rows(self) -> list[PassRow]:
        """The rows of its passes (collect.rows.pass_row)."""
        return pass_rows(self.job) if self.job else []

    def ok_rows(self) -> list[PassRow]:
        """The rows of its ok passes."""
        return ok_rows(pass_rows(self.job)) if self.job else []

    def curve(self, concurrency: int | None = None, label: str | None = None) -> dict | None:
        """Per-request latency CDF data at one concurrency: its ok passes pooled (its only mode,
        else the first)."""
        curves = pooled_curves(self.run_dir, self.job, concurrency=concurrency,
                               mode=self.modes[0] if self.modes else None) if self.job else []
        if not curves:
            return None
        return dict(curves[0], label=f"{label or self.name}: {curves[0]['label']}")

    def interactivity_rows(self, gpus: int | None) -> list[dict]:
        """Rows for series.interactivity_points: each (mode, concurrency) aggregate."""
        return throughput_rows(self.job, gpus) if self.job else []


def steady_primary(job: CampaignSummary, rows: list[PassRow] | None = None) -> bool:
    """The job's comparisons state the steady-state throughput (benchmark.primary_metric is
    output_tps and every ok pass has one): its charts draw it first, the makespan beside it."""
    from ..ab_stats.family import steady_available
    from ..ab_stats.metrics import PRIMARY_DEFAULT

    from ..collect.rows import columns

    ok = ok_rows(pass_rows(job) if rows is None else rows)
    return job.campaign.primary_metric == PRIMARY_DEFAULT and steady_available(columns(ok), [])


def throughput_rows(job: CampaignSummary, gpus: int | None) -> list[dict]:
    """Per (mode, concurrency) of a job, the means of its ok passes for the throughput-per-GPU
    charts (series.interactivity_points): the primary throughput (the steady state when the job's
    comparisons use it: every ok pass has it and benchmark.primary_metric is output_tps), the
    makespan one, TPOT, TTFT and E2E."""
    rows = pass_rows(job)
    steady = steady_primary(job, rows)
    return [{"label": a.mode, "concurrency": a.concurrency, "gpus": gpus,
             "output_tps": a.metrics["output_tps"].mean, "tpot_ms": a.metrics["tpot_mean_ms"].mean,
             "ttft_s": a.metrics["ttft_mean_s"].mean, "e2e_s": a.metrics["e2e_mean_s"].mean,
             **({"steady_tps": a.metrics["steady_output_tps"].mean} if steady else {}),
             "verdict": "ok" if a.passes_ok == a.passes else "invalid"} for a in aggregates(rows)]


def run_curve(run, label: str | None = None) -> dict:
    """One run's per-request CDF data: TTFT, E2E, TPOT per request, every ITL (ms), with the
    summary's p50/p95 (ITL's computed here, the same linear percentile) and benchmark.slo."""
    from ..parse.stats import percentile
    from . import series

    lat = series.request_latencies(run.record)
    bench = run.summary.bench if run.summary is not None else None
    dec = series.tpot_itl(run.record)

    def marks(name: str) -> dict:           # the table's p50/p95 of one latency
        x = getattr(bench, name) if bench is not None else None
        return {} if x is None else {"mean": x.mean, "p50": x.p50, "p95": x.p95, "p99": x.p99}
    return {"label": label or run.mode, "ttft": series.cdf_points(lat["ttft"]),
            "e2e": series.cdf_points(lat["e2e"]), "ttft_p": marks("ttft"),
            "e2e_p": marks("e2e"), "tpot": series.cdf_points(dec["tpot"]),
            "tpot_p": marks("tpot"), "itl": series.cdf_points(dec["itl"]),
            "itl_p": {q: percentile(sorted(dec["itl"]), n) for q, n in (("p50", 50), ("p95", 95))}
            if dec["itl"] else {}, "slo": bench.goodput.slo_ms if bench is not None and bench.goodput else {}}


def pooled_curves(run_dir: Path, job: CampaignSummary, *, concurrency: int | None = None,
                  mode: str | None = None) -> list[dict]:
    """Per (mode, concurrency) of a job: the per-request latencies of its ok passes pooled
    (TTFT, E2E, TPOT per request, every ITL), with pooled p50/p95 (the same linear percentile as
    the tables) for the CDF markers; only one concurrency / mode when given."""
    from ..parse.bench import read_last_record
    from ..parse.stats import percentile
    from . import series

    run = open_run(run_dir)
    groups: dict = {}
    keys = ("ttft", "e2e", "tpot", "itl")
    for p in job.passes:
        r = p.ref
        launch = run.launch(r.launch)
        if p.verdict != "ok" or launch is None or (concurrency is not None and r.concurrency != concurrency) \
                or (mode is not None and r.mode != mode):
            continue
        rec = read_last_record(run.launch_layout(launch).bench(r.key)).record
        lat, dec = series.request_latencies(rec), series.tpot_itl(rec)
        g = groups.setdefault((r.mode, r.concurrency, r.rate), {**{k: [] for k in keys}, "n": 0,
                                                        "slo": p.bench.goodput.slo_ms if p.bench.goodput else {}})
        for k in ("ttft", "e2e"):
            g[k] += lat[k]
        for k in ("tpot", "itl"):
            g[k] += dec[k]
        g["n"] += 1
    out = []
    for (m, c, q), g in groups.items():        # an open-loop rate is a load of its own
        if not g["ttft"]:
            continue
        curve = {"label": f"{m} {load_label(c, q)} ({g['n']} pass{'es' if g['n'] != 1 else ''})", "mode": m,
                 "concurrency": c, "slo": g["slo"]}
        for key in keys:
            xs = sorted(g[key])
            curve[key] = series.cdf_points(xs)
            curve[f"{key}_p"] = {"p50": percentile(xs, 50), "p95": percentile(xs, 95)} if xs else {}
        out.append(curve)
    return out


def load_side(run_dir, name: str | None = None) -> Side:
    run_dir = Path(run_dir)
    job = read_summary(run_dir)
    return Side(run_dir, name or (job.run_id if job else run_dir.name), job)


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
