"""The data behind the report's charts, and what the figures draw from it (artists, not pixels):
time axes from the first request with the client's measured benchmark as the band, lines broken at
pauses, one y scale for every replica, failed passes marked, TPOT/ITL distributions, server metrics
over time, throughput per GPU against interactivity with its Pareto front, every pass per mode, a
config diff. Runs: tests/fixtures/report and report-campaign (real local-cluster runs)."""
from __future__ import annotations

import json
import math
import shutil
import statistics
from datetime import timedelta

import pytest

from helpers.curves import cdf_at
from helpers import ROOT
from slurm_ab.parse.events import parse_event_line, EventLog
from dataclasses import replace

from slurm_ab.collect.records import Goodput
from slurm_ab.collect.rows import PassRow
from slurm_ab.collect.server_metrics import GaugePoint, ReplicaMetrics, ServerMetrics
from slurm_ab.report import plots, rundata, series

FIX = ROOT / "tests" / "fixtures" / "report"
CAMP = ROOT / "tests" / "fixtures" / "report-campaign"
from slurm_ab.model.rundir import Layout


def _summary(path) -> dict:
    return json.loads(Layout(path).summary("json").read_text())


# ---- time axes ----------------------------------------------------------------------------------

def test_time_starts_at_the_first_request_and_the_band_is_the_clients_duration():
    run = rundata.load(FIX / "dev-tp32")
    tl = series.timeline(run)
    clk = series.clock(run, tl)
    assert clk.label == "seconds since the first request"
    assert clk.t0 == min(r.start for r in tl.requests) > 1.0       # the client step started earlier
    shifted = series.shift_timeline(tl, clk)
    assert min(r.start for r in shifted.requests) == 0.0
    span = series.bench_span(run, clk)
    assert span == (0.0, run.record["duration"])
    # the last request ends at the client's duration (+ its stream close), not at bench_end
    assert max(r.end for r in shifted.requests) == pytest.approx(span[1], abs=0.05)
    win = series.shift_windows(series.windows(run), clk)
    assert win["benchmark"][0][0] == pytest.approx(-clk.t0)
    fig = plots.fig_timeline(shifted, windows=win, bench=span)
    bands = [p for p in fig.axes[0].patches if p.get_facecolor()[:3] == pytest.approx(
        tuple(int(plots.PHASE_COLORS["benchmark"][i:i + 2], 16) / 255 for i in (1, 3, 5)))]
    assert bands and bands[0].get_x() == 0.0


def test_lines_break_at_pauses_and_pass_boundaries():
    xs, ys = series.split_gaps([0, 1, 2, 3, 10, 11, 12], [5, 5, 5, 5, 6, 6, 6])
    assert xs == [0, 1, 2, 3, None, 10, 11, 12] and ys[4] is None
    xs, _ = series.split_gaps([0, 1, 2, 3, 4], [1, 1, 1, 1, 1], breaks=(2.5,))
    assert xs == [0, 1, 2, None, 3, 4]


def test_decode_panels_share_one_y_scale_and_gaps_stay_gaps():
    run = rundata.load(FIX / "dev-tp32-dflash")
    dec = series.decode_series(run)
    slow = {g: dict(d, gen=[v / (3 if g == 1 else 1) for v in d["gen"]]) for g, d in dec.items()}
    slow[1]["t"] = slow[1]["t"][:5] + [t + 30 for t in slow[1]["t"][5:]]      # a 30 s pause
    fig = plots.fig_decode(slow, series.windows(run))
    gen = [ax for ax in fig.axes if any(ln.get_gid() and ln.get_gid().startswith("gen-") for ln in ax.lines)]
    assert len(gen) == 2 and gen[0].get_ylim() == gen[1].get_ylim()          # 3x slower looks 3x lower
    line = next(ln for ln in gen[1].lines if ln.get_gid() == "gen-1")
    assert sum(math.isnan(x) for x in line.get_xdata()) == 1                 # broken once, at the pause


def test_a_failed_pass_is_marked_in_phases_and_decode():
    run_dir = ROOT / "tests" / "fixtures" / "report" / "dev-tp32"
    run = rundata.load(run_dir)
    lines = (run_dir / "events.log").read_text().replace("bench_end rc=0", "bench_end rc=1").splitlines()
    ev = EventLog(tuple(e for e in (parse_event_line(t, i + 1) for i, t in enumerate(lines)) if e))
    from dataclasses import replace
    bad = replace(run, events=ev)
    win = series.windows(bad)
    assert win["failed"] == win["benchmark"] != []
    fig = plots.fig_phases(series.phases(bad), failed=tuple(win["failed"]))
    assert [p for p in fig.axes[0].patches if p.get_gid() == "failed-pass"]
    fig = plots.fig_decode(series.decode_series(bad), win)
    assert all(any(p.get_gid() == "failed-pass" for p in ax.patches) for ax in fig.axes)


def test_slide_quality_and_run_context():
    run = rundata.load(FIX / "dev-tp32")
    ctx = series.run_context(run)
    assert ctx == "tp32 · 16384 -> 512 tokens · C=8 · 40 prompts · Kimi-K3 · run dev-tp32"
    fig = plots.fig_cdfs([{"label": "x", "ttft": ([1.0, 2.0], [0, 1]), "e2e": ([1.0, 2.0], [0, 1])}],
                         context=ctx)
    assert fig._suptitle.get_text() == ctx
    assert min(t.get_fontsize() for ax in fig.axes for t in ax.get_xticklabels()) >= 10
    assert not any(ax.get_legend() for ax in fig.axes) and fig.legends      # beside, never over
    data = plots.png(fig)
    import struct
    w, h = struct.unpack(">II", data[16:24])
    assert w >= 1600 and plots.DPI >= 150


# ---- distributions ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ("dev-tp32", "dev-tp32-dflash"))
def test_tpot_and_itl_distributions_are_the_clients_numbers(name):
    run = rundata.load(FIX / name)
    d = series.tpot_itl(run.record)
    s = _summary(FIX / name)["passes"][0]["bench"]
    assert len(d["tpot"]) == s["completed"]
    assert sum(d["tpot"]) / len(d["tpot"]) == pytest.approx(s["tpot"]["mean"], rel=1e-9)
    assert len(d["itl"]) == sum(len(x) for x in run.record["itls"])
    xs, ys = series.cdf_points(d["tpot"])
    assert cdf_at(xs, ys, s["tpot"]["p95"]) == pytest.approx(0.95, abs=1e-9)
    from slurm_ab.report import html
    fig = plots.fig_cdfs([html.cdf_curve(run)], plots.DECODE_PANELS)
    marks = {ln.get_gid(): ln.get_xydata()[0] for ax in fig.axes for ln in ax.lines if ln.get_gid()}
    assert marks["tpot-p95-0"] == pytest.approx([s["tpot"]["p95"], 0.95])


# ---- server metrics over time -------------------------------------------------------------------

def test_metrics_over_time_from_the_collected_series():
    run = rundata.load(FIX / "dev-tp32")
    t0 = run.origin
    pts = tuple(GaugePoint(r, 0.0, (t0 + timedelta(seconds=k * 2)).isoformat(sep=" ", timespec="milliseconds"),
                           in_flight=f, running=f - q, queued=q, kv_usage=0.1 * f)
                for k, (r, f, q) in enumerate((("start", 0, 0), ("1", 4, 1), ("2", 4, 0), ("end", 0, 0))))
    sm = ServerMetrics(True, (ReplicaMetrics(0, series=pts), ReplicaMetrics(1, series=pts[:2])))
    r2 = replace(run, summary=replace(run.summary, server_metrics=sm))
    clk = series.Clock(1.0, "x")
    m = series.metrics_over_time(r2, clk)
    assert m[0]["t"] == [-1.0, 1.0, 3.0, 5.0] and m[0]["running"] == [0, 3, 4, 0]
    assert m[1]["in_flight"] == [0, 4]
    fig = plots.fig_metrics_time(m)
    lines = {ln.get_gid(): ln for ax in fig.axes for ln in ax.lines if ln.get_gid()}
    assert list(lines["running-0"].get_ydata()) == [0, 3, 4, 0]
    assert list(lines["kv-1"].get_ydata()) == pytest.approx([0.0, 0.4])
    req_axes = [ax for ax in fig.axes if any((ln.get_gid() or "").startswith("running") for ln in ax.lines)]
    assert req_axes[0].get_ylim() == req_axes[1].get_ylim()
    # a gauge holds its value until the next scrape: steps, not ramps (issue 32: 0 -> 4 drawn as a slope)
    assert {lines[g].get_drawstyle() for g in ("in_flight-0", "running-0", "queued-1", "kv-0")} == {"steps-post"}


# ---- throughput per GPU against interactivity ---------------------------------------------------

def test_interactivity_points_and_their_pareto_front():
    rows = [{"label": "tp32", "concurrency": 1, "output_tps": 320.0, "tpot_ms": 2.5, "gpus": 64},
            {"label": "tp32", "concurrency": 8, "output_tps": 1500.0, "tpot_ms": 4.0, "gpus": 64},
            {"label": "pp8", "concurrency": 8, "output_tps": 800.0, "tpot_ms": 8.0, "gpus": 64},
            {"label": "pp8", "concurrency": 16, "output_tps": 1600.0, "tpot_ms": 9.0, "gpus": 64},
            {"label": "x", "concurrency": 1, "output_tps": 100.0, "tpot_ms": None, "gpus": 64}]
    pts = series.interactivity_points(rows)
    assert len(pts) == 4                                   # no TPOT: no point
    assert pts[0].tok_s_user == pytest.approx(400.0) and pts[0].tok_s_gpu == pytest.approx(5.0)
    xy = [(p.tok_s_user, p.tok_s_gpu) for p in pts]
    front = series.upper_front(xy)
    assert front == [3, 1, 0]                              # pp8 C=8 is beaten on both axes
    fig = plots.fig_interactivity(pts)
    line = next(ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "pareto")
    assert list(line.get_xdata()) == [xy[i][0] for i in front]


def test_interactivity_of_a_sweep_campaign():
    s = _summary(CAMP / "camp-sweep")
    rows = [{"label": a["mode"], "concurrency": a["concurrency"], "gpus": 64,
             "output_tps": a["metrics"]["output_tps"]["mean"], "tpot_ms": a["metrics"]["tpot_mean_ms"]["mean"]}
            for a in s["aggregates"]]
    pts = series.interactivity_points(rows)
    assert {p.concurrency for p in pts} == {1, 8}
    by_c = {p.concurrency: p for p in pts}
    assert by_c[1].tok_s_user > by_c[8].tok_s_user and by_c[8].tok_s_gpu > by_c[1].tok_s_gpu


def test_gpus_of_a_run():
    assert series.gpus_of(rundata.load(FIX / "dev-tp32")) == 2 * 4 * 8


# ---- passes of a campaign -----------------------------------------------------------------------

def test_every_pass_per_mode_and_the_failed_ones():
    s = _summary(CAMP / "camp-sweep")
    passes = [PassRow.of(dict(p, verdict="failed") if k == 0 else p) for k, p in enumerate(s["rows"])]
    strips = series.pass_strips(passes)
    groups = {g["label"]: g for g in strips["output_tps"]}
    assert set(groups) == {"tp32 C=1", "tp32 C=8"}
    c1 = groups["tp32 C=1"]
    assert len(c1["values"]) == 2 and [ok for _, _, ok in c1["values"]] == [False, True]
    assert c1["mean"] == pytest.approx(passes[1].value("output_tps"))        # ok passes only
    agg = {a["concurrency"]: a["metrics"]["output_tps"]["mean"] for a in s["aggregates"]}
    assert groups["tp32 C=8"]["mean"] == pytest.approx(agg[8])
    fig = plots.fig_pass_strips(strips, dict(series.PASS_METRICS))
    gids = {ln.get_gid() for ax in fig.axes for ln in ax.lines}
    assert "output_tps-failed-0" in gids and "output_tps-mean-1" in gids


# ---- configuration side by side -----------------------------------------------------------------

def test_config_diff_puts_what_differs_first():
    rows = series.config_diff({"A": {"tp-size": 32, "mem-fraction-static": 0.86, "enable-metrics": True},
                               "B": {"tp-size": 32, "mem-fraction-static": 0.83,
                                     "speculative-algorithm": "DFLASH", "enable-metrics": True}})
    assert [r[0] for r in rows] == ["mem-fraction-static", "speculative-algorithm", "enable-metrics", "tp-size"]
    assert rows[0] == ("mem-fraction-static", [0.86, 0.83], True)
    assert rows[1][1] == [None, "DFLASH"] and rows[-1][2] is False


# ---- goodput against SLOs -----------------------------------------------------------------------

def test_goodput_rows_and_chart():
    g = Goodput(slo_ms={"ttft": 500.0, "tpot": 50.0}, requests=40, good=30, goodput_rps=1.5,
                attainment=0.75, attainment_by_metric={"ttft": 0.8, "tpot": 0.95})
    rows = series.goodput_rows([("tp32 C=8", g), ("no slo", None), ("pp8 C=8", replace(g, good=20, attainment=0.5))])
    assert [r["label"] for r in rows] == ["tp32 C=8", "pp8 C=8"]
    fig = plots.fig_goodput(rows)
    bars = [p for p in fig.axes[0].patches]
    assert [b.get_width() for b in bars] == pytest.approx([75.0, 50.0])
    marks = {ln.get_gid(): list(ln.get_xdata()) for ln in fig.axes[0].lines}
    assert marks["slo-ttft"] == pytest.approx([80.0, 80.0]) and "slo-e2el" not in marks
    assert [b.get_width() for b in fig.axes[1].patches] == pytest.approx([1.5, 1.5])


def test_slo_thresholds_on_the_latency_cdfs():
    curve = {"label": "x", "ttft": ([100.0, 900.0], [0, 1]), "e2e": ([1000.0, 2000.0], [0, 1]),
             "slo": {"ttft": 500.0, "e2el": 1500.0}}
    fig = plots.fig_cdfs([curve])
    lines = {ln.get_gid(): ln.get_xdata()[0] for ax in fig.axes for ln in ax.lines if ln.get_gid()}
    assert lines["slo-ttft"] == pytest.approx(0.5) and lines["slo-e2e"] == pytest.approx(1.5)


def test_folded_gaps_give_a_tpot_but_no_inter_token_latencies():
    """The stored campaign fixtures keep only each request's sum of ITLs: that sum is not a gap."""
    rec = {"itls": [[0.004, 0.006, 0.005], [0.9]], "output_lens": [4, 200], "errors": ["", ""]}
    d = series.tpot_itl(rec)
    assert d["tpot"] == pytest.approx([5.0, 0.9 / 199 * 1000])
    assert d["itl"] == pytest.approx([4.0, 6.0, 5.0])


def test_a_sweeps_settings_say_its_concurrencies():
    from slurm_ab.report.sides import mode_settings
    st = mode_settings(CAMP / "camp-sweep")["tp32"]
    assert st["benchmark.concurrency"] == "1, 8" and st["benchmark.num_prompts"] == "2, 16"
    assert st["tp"] == 32 and st["--chunked-prefill-size"] == 8192


def test_servers_in_flight_for_a_run_without_client_output():
    run = rundata.load(FIX / "dev-tp32")
    t0 = run.origin

    def pts(vals):
        return tuple(GaugePoint(str(k), 0.0, (t0 + timedelta(seconds=2 * k)).isoformat(sep=" ", timespec="milliseconds"),
                                in_flight=v) for k, v in enumerate(vals))
    sm = ServerMetrics(True, (ReplicaMetrics(0, series=pts([0, 4, 4, 3])), ReplicaMetrics(1, series=pts([0, 4, 3]))))
    r2 = replace(run, summary=replace(run.summary, server_metrics=sm))
    assert series.server_in_flight(r2) == [(0.0, 0), (2.0, 8), (4.0, 7)]       # rounds both answered


def test_a_runs_page_draws_its_goodput(tmp_path):
    """bench.goodput (issue 22's record) on a run's page: the share meeting the SLOs."""
    from slurm_ab.report import html
    d = tmp_path / "r"
    shutil.copytree(FIX / "dev-tp32", d)
    s = _summary(d)
    s["passes"][0]["bench"]["goodput"] = {"slo_ms": {"ttft": 500.0}, "requests": 40, "good": 30, "goodput_rps": 2.2,
                                          "attainment": 0.75, "attainment_by_metric": {"ttft": 0.75}}
    Layout(d).summary("json").write_text(json.dumps(s))
    names = [n for n, _, _ in html.run_plots(rundata.load(d))]
    assert "goodput.png" in names
    assert "goodput.png" not in [n for n, _, _ in html.run_plots(rundata.load(FIX / "dev-tp32"))]


def test_diagnosis_leads_with_what_is_abnormal_for_this_run(tmp_path):
    """A run without client output: its Diagnosis no longer leads with NCCL's routine 'No device
    found' or the teardown's CANCELLED lines (issue 32); they are listed as routine. An OOM run
    still leads with its OOM, its teardown's cancellation routine."""
    from helpers.rundir_builder import without_client_output
    from slurm_ab.collect import collect_and_write
    from slurm_ab.report.html import diagnosis, rank_findings

    run_dir = without_client_output(FIX / "dev-tp32", tmp_path / "no-client")
    collect_and_write(run_dir, report=False)
    run = rundata.load(run_dir)
    assert run.verdict == "failed" and {f.kind for f in run.summary.findings} >= {"nccl_net", "slurm_cancelled"}
    abnormal, routine = rank_findings(run.summary.findings, run.reasons, run.verdict)
    assert abnormal == [] and {f.kind for f in routine} == {f.kind for f in run.summary.findings}
    html = diagnosis(run, run_dir)
    assert "No line of the logs explains the verdict" in html and "<h3>nccl_net" not in html
    assert html.index("Routine lines") < html.index("No device found")
    oom = rundata.load(FIX / "dev-oom")
    abnormal, routine = rank_findings(oom.summary.findings, oom.reasons, oom.verdict)
    assert abnormal[0].kind == "oom" and f"[{abnormal[0].file}:{abnormal[0].line}]" in oom.reasons[0]
    assert "slurm_cancelled" in {f.kind for f in routine} and "oom" not in {f.kind for f in routine}


# ---- issue 32: charts that do not mislead, and the views the peers show ---------------------------

def _labels(ax) -> dict:
    """'C=8' -> [(x, y) of each label's anchor plus its offset in points] of a panel's annotations."""
    out: dict = {}
    for t in ax.texts:
        if hasattr(t, "xyann"):
            out.setdefault(t.get_text(), []).append((t.xy, t.xyann))
    return out


def test_points_that_fall_together_stay_visible_and_their_labels_do_not_pile():
    """Run-vs-sweep compare: A's C=8 point sat under B's with the two 'C=8' labels on top of each
    other. Series differ by marker and size (A larger), stacked labels, TTFT and E2E panels share
    the y axis, and a row that cannot be placed is named on the panel."""
    rows = [{"label": "A tp32", "concurrency": 8, "gpus": 32, "output_tps": 1535.6, "tpot_ms": 4.18,
             "ttft_s": 0.48, "e2e_s": 2.62, "steady_tps": 1558.3},
            {"label": "B tp32", "concurrency": 8, "gpus": 32, "output_tps": 1582.5, "tpot_ms": 3.95,
             "ttft_s": 0.56, "e2e_s": 2.58, "steady_tps": 1586.7},
            {"label": "B tp32", "concurrency": 1, "gpus": 32, "output_tps": 300.0, "tpot_ms": 3.3,
             "ttft_s": 0.1, "e2e_s": 1.7, "steady_tps": 310.0},
            {"label": "B tp32", "concurrency": 4, "gpus": 32, "output_tps": 900.0, "tpot_ms": None}]
    pts = series.interactivity_points(rows)
    assert [p.primary for p in pts] == ["steady-state output tok/s"] * 3            # the primary's figure
    assert pts[0].tok_s_gpu == pytest.approx(1558.3 / 32) and pts[0].makespan_gpu == pytest.approx(1535.6 / 32)
    assert series.left_out(rows) == ["B tp32 C=4 (no TPOT)"]
    fig = plots.fig_interactivity(pts, left_out=tuple(series.left_out(rows)))
    tpot, ttft, e2e = fig.axes[:3]
    lines = {ln.get_gid(): ln for ln in tpot.lines if ln.get_gid()}
    a, b = lines["mode-A tp32"], lines["mode-B tp32"]
    assert a.get_marker() != b.get_marker() and a.get_markersize() > b.get_markersize()
    assert list(lines["makespan-A tp32"].get_ydata()) == pytest.approx([1535.6 / 32])       # hollow, beside
    assert list(ttft.lines[0].get_xdata()) == [0.48] and ttft.get_xlabel() == "TTFT mean (s)"
    assert e2e.get_xlabel().startswith("E2E") and ttft.get_ylim() == tpot.get_ylim()
    assert [ln.get_gid() for ln in ttft.lines if ln.get_gid() and "pareto" in ln.get_gid()] == ["pareto-ttft_s"]
    # the two C=8 labels: one above the other, never at one spot
    (first, second) = _labels(tpot)["C=8"]
    assert first[1] != second[1]
    assert any(t.get_gid() == "left-out" and "B tp32 C=4 (no TPOT)" in t.get_text() for t in tpot.texts)
    # a history's runs are points alone: no line joins separate runs of one mode
    hist = series.interactivity_points([dict(r, line=None) for r in rows[:2]])
    fig = plots.fig_interactivity(hist)
    assert all(ln.get_linestyle() == "None" for ln in fig.axes[0].lines
               if (ln.get_gid() or "").startswith("points-"))
    assert not [ln for ln in fig.axes[0].lines if (ln.get_gid() or "").startswith("mode-") and len(ln.get_xdata())]


def test_goodput_chart_labels_clear_the_markers_and_titles_are_short():
    """'LO attainment' was clipped, '70 % (28/40)' sat on the markers, the goodput bar had no value."""
    g = Goodput(slo_ms={"ttft": 500.0, "tpot": 50.0}, requests=40, good=28, goodput_rps=1.5,
                attainment=0.7, attainment_by_metric={"ttft": 0.9, "tpot": 0.95})
    fig = plots.fig_goodput(series.goodput_rows([("tp32 C=8", g)]), target_pct=90.0)
    ax, axr = fig.axes[:2]
    assert ax.get_title() == "SLO attainment" and axr.get_title() == "Goodput"
    assert "TTFT <= 500 ms" in ax.get_xlabel() or "ttft" in ax.get_xlabel().lower()
    label = next(t for t in ax.texts if t.get_gid() == "attainment-label-0")
    assert label.get_text() == "70% (28/40)" and label.get_position()[0] > 95.0          # right of every marker
    assert next(t for t in axr.texts if t.get_gid() == "goodput-label-0").get_text() == " 1.50/s"
    assert [ln.get_xdata()[0] for ln in ax.lines if ln.get_gid() == "slo-target"] == [90.0]
    fig.canvas.draw()                                   # nothing drawn outside the figure
    r = fig.canvas.get_renderer()
    fb = fig.bbox
    for t in (ax.title, axr.title, label):
        bb = t.get_window_extent(r)
        assert fb.x0 <= bb.x0 and bb.x1 <= fb.x1 and bb.y1 <= fb.y1, t.get_text()


def _row(mode, c, verdict="ok", total=40, ok=40, att=None, rps=None, repeat=1):
    from slurm_ab.collect.rows import PassRow
    return PassRow.of({"mode": mode, "concurrency": c, "repeat": repeat, "verdict": verdict,
                       "requests_total": total, "requests_ok": ok, "slo_attainment": att, "goodput_rps": rps})


def test_errors_and_goodput_against_concurrency():
    """The peers' 'highest C that meets the SLOs', errors against load: per (mode, C) of a job's
    passes; a pass that failed outright counts as a failed pass, not as requests."""
    rows = [_row("tp32", 1, att=1.0, rps=0.9), _row("tp32", 1, att=0.95, rps=0.8, repeat=2),
            _row("tp32", 8, ok=36, att=0.9, rps=2.5), _row("tp32", 8, "failed", total=None, ok=None, repeat=2),
            _row("tp32", 32, ok=20, att=0.4, rps=1.0), _row("pp8", 1, att=0.5, rps=0.4)]
    pts = {(p.mode, p.concurrency): p for p in series.load_points(rows)}
    assert pts[("tp32", 8)].error_pct == pytest.approx(10.0) and pts[("tp32", 8)].passes_ok == 1
    assert pts[("tp32", 1)].attainment == pytest.approx(0.975) and pts[("tp32", 32)].error_pct == 50.0
    assert series.highest_meeting(list(pts.values()), 90.0) == {"pp8": None, "tp32": 8}
    fig = plots.fig_load(list(pts.values()), target_pct=90.0)
    err, att, good = fig.axes[:3]
    lines = {ln.get_gid(): ln for ax in fig.axes for ln in ax.lines if ln.get_gid()}
    assert list(lines["error_pct-tp32"].get_ydata()) == pytest.approx([0.0, 10.0, 50.0])
    assert list(lines["failed-passes-tp32"].get_xdata()) == [8]                          # ringed red
    assert list(lines["meets-tp32"].get_xdata()) == [8] and "meets-pp8" not in lines     # starred
    assert list(lines["goodput_rps-tp32"].get_ydata()) == pytest.approx([0.85, 2.5, 1.0])
    assert att.get_title() == "SLO attainment against load"
    fig = plots.fig_load(series.load_points([_row("tp32", 1), _row("tp32", 8)]))          # no SLOs: said
    assert [ax.get_title() for ax in fig.axes] == ["Errors against load", ""]
    assert [t.get_gid() for t in fig.axes[1].texts] == ["no-slo"]


def test_latency_of_each_request_over_time():
    """Per-request TTFT/E2E/TPOT at each request's start (drift, throttling): the run's timeline's
    bars and the client's TPOT; a launch's passes on its time axis."""
    run = rundata.load(FIX / "dev-tp32")
    tl = series.timeline(run)
    lat = series.timeline_latencies(tl, run.record)
    assert len(lat) == len(tl.requests) == run.record["completed"]
    assert sorted(p.ttft_ms for p in lat) == pytest.approx(sorted(x * 1000 for x in run.record["ttfts"]), abs=1e-6)
    # TPOT as bench_serving defines it: (E2E - TTFT) / (output tokens - 1)
    tp = [(lat_ - tt) / (n - 1) * 1000 for lat_, tt, n in
          zip(run.record["e2e_latencies"] if "e2e_latencies" in run.record else [], run.record["ttfts"],
              run.record["output_lens"]) if n > 1]
    got = sorted(p.tpot_ms for p in lat if p.tpot_ms is not None)
    if tp:
        assert got == pytest.approx(sorted(tp), rel=1e-3)
    assert statistics.mean(got) == pytest.approx(run.record["mean_tpot_ms"], rel=1e-3)
    fig = plots.fig_timeline(series.shift_timeline(tl, series.clock(run, tl)), latency=lat)
    gids = {ln.get_gid() for ax in fig.axes for ln in ax.lines}
    assert {"latency-e2e", "latency-ttft", "latency-tpot", "latency-e2e-median"} <= gids
    # a launch of a campaign: every pass's requests, each pass aligned on its first access line
    from slurm_ab.model.rundir import open_run
    from slurm_ab.parse.bench import read_last_record
    camp = open_run(CAMP / "camp-sweep")
    launch = camp.launch(1)
    recs = [(p.key, read_last_record(camp.launch_layout(launch).bench(p.key)).record) for p in launch.passes]
    files = rundata.load(CAMP / "camp-sweep", 1)
    pts = series.pass_latencies(files, recs)
    assert len(recs) == 4 and len(pts) == sum(r["completed"] for _, r in recs)
    assert [p.label for p in sorted(pts, key=lambda p: p.t)] == [k for k, r in recs for _ in range(r["completed"])]
    win = series.windows(files)["benchmark"]
    for (s0, e0), (key, _) in zip(win, recs):      # each pass's requests inside its client step
        mine = [p.t for p in pts if p.label == key]
        assert s0 <= min(mine) and max(mine) <= e0


def test_pass_bands_are_named_on_phases_and_decode():
    """Which band is C=1? Each benchmark bar and client-step band is named by its pass."""
    lanes = [("replica 0", [("loading", -20.0, -5.0), ("benchmark", 0.0, 10.0), ("benchmark", 11.0, 40.0)])]
    fig = plots.fig_phases(lanes, labels=("C=1 r1", "C=8 r1"))
    texts = {t.get_gid(): t.get_text() for t in fig.axes[0].texts if t.get_gid()}
    assert texts == {"pass-label-0": "C=1 r1", "pass-label-1": "C=8 r1"}
    run = rundata.load(FIX / "dev-tp32-dflash")
    fig = plots.fig_decode(series.decode_series(run), series.windows(run), labels=("C=8 r1",))
    assert [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "pass-label-0"] == ["C=8 r1"]


def test_percentile_table_per_metric():
    """p50/p90/p95/p99/min/max/std per metric, from the per-request values (AIPerf's console):
    the run's p50/p95/p99 are the summary's; a p99 of 40 requests is marked, it has no value above it."""
    from slurm_ab.report.sides import run_curve
    from slurm_ab.tables.percentiles import percentile_rows, percentile_table

    run = rundata.load(FIX / "dev-tp32")
    c = run_curve(run)
    groups = [(c["label"], {k: c[k][0] for k in ("ttft", "tpot", "itl", "e2e")})]
    rows = {m: d for _, m, d in percentile_rows(groups)}
    assert list(rows) == ["TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (s)"]
    b = run.summary.bench
    for metric, lat in (("TTFT (ms)", b.ttft), ("E2E (s)", b.e2e)):
        d = rows[metric]
        assert (d.mean, d.p50, d.p95, d.p99) == pytest.approx((lat.mean, lat.p50, lat.p95, lat.p99), rel=1e-6)
        assert d.n == b.completed and d.min <= d.p50 <= d.p90 <= d.p95 <= d.max
        assert d.std == pytest.approx(statistics.stdev(c[metric.split()[0].lower()][0]), rel=1e-9)
    text = percentile_table(groups)
    head = text.splitlines()[0]
    assert [x.strip() for x in head.strip("|").split("|")] == ["Run", "Metric", "n", "mean", "p50", "p90", "p95",
                                                               "p99", "min", "max", "std"]
    e2e = next(ln for ln in text.splitlines() if "E2E (s)" in ln)
    cells = [x.strip() for x in e2e.strip("|").split("|")]
    assert cells[2] == "40" and cells[7].endswith("*") and not cells[6].endswith("*")   # p99 thin, p95 not
    assert cells[3] == f"{rows['E2E (s)'].mean / 1000:.2f}"                           # seconds
    assert "* p99 of fewer than 100 values" in text
    assert percentile_table([("none", {})]) == ""


def test_the_running_median_never_joins_two_passes():
    pts = [series.LatencyPoint(float(k), 100.0, 1000.0 + k, 5.0, "c1-r1" if k < 10 else "c8-r1") for k in range(20)]
    from matplotlib.figure import Figure
    ax = Figure().subplots()
    plots.draw_latencies(ax, pts)
    med = next(ln for ln in ax.lines if ln.get_gid() == "latency-e2e-median")
    xs = list(med.get_xdata())
    assert sum(math.isnan(x) for x in xs) == 2 and math.isnan(xs[10])       # broken after the first pass


def test_goodput_in_tables_and_terminal():
    """Goodput was in CSV/JSON only: the campaign tables (aggregates, curve, passes), the runs table
    and a job's answer line carry it when benchmark.slo is set, and not otherwise."""
    from slurm_ab.tables.answer import goodput_phrase
    from slurm_ab.tables.campaign import aggregate_table, curve_table, passes_table
    from slurm_ab.tables.runs import runs_table

    rows = [_row("tp32", 1, att=1.0, rps=0.9), _row("tp32", 1, att=0.95, rps=0.8, repeat=2),
            _row("tp32", 8, ok=36, att=0.9, rps=2.5)]
    for text in (aggregate_table(rows), curve_table(rows), passes_table(rows)):
        head = [h.strip() for h in text.splitlines()[0].strip("|").split("|")]
        assert "SLOs met" in head and "Goodput (req/s)" in head, head
    line = aggregate_table(rows).splitlines()[2]                          # tp32 at C=1
    assert line.startswith("| tp32   |   1 |") and line.endswith("|      97.5% |              0.85 |")
    assert "SLOs met" not in aggregate_table([_row("tp32", 1), _row("tp32", 1, repeat=2)])
    assert goodput_phrase(rows[:2], 90.0) == "97.5% of requests met the SLOs (target 90%), goodput 0.85 req/s"
    run = rundata.load(FIX / "dev-tp32")
    g = Goodput(slo_ms={"ttft": 500.0}, requests=40, good=30, goodput_rps=2.2, attainment=0.75,
                attainment_by_metric={"ttft": 0.75})
    s = replace(run.summary, bench=replace(run.summary.bench, goodput=g))
    table = runs_table([s])
    assert table.headers[-2] == "SLOs met / goodput" and table.rows[0][-2] == "75.0% / 2.20 req/s"
    assert "SLOs met / goodput" not in runs_table([run.summary]).headers


def test_percentiles_of_too_few_requests_are_marked():
    """p95 values from 2 requests carried no warning: such cells are marked '*' in the campaign
    tables, with the note below saying what they rest on."""
    from slurm_ab.collect.rows import PassRow
    from slurm_ab.tables.campaign import aggregate_table, thin_notes

    def row(c, n, repeat):
        return PassRow.of({"mode": "tp32", "concurrency": c, "repeat": repeat, "verdict": "ok", "requests_ok": n,
                           "requests_total": n, "ttft_p95_s": 1.0, "ttft_mean_s": 0.5, "output_tps": 100.0})
    rows = [row(1, 2, 1), row(1, 2, 2), row(8, 40, 1), row(8, 40, 2)]
    lines = aggregate_table(rows).splitlines()
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    p95 = head.index("TTFT p95 (s)")
    c1, c8 = ([x.strip() for x in ln.strip("|").split("|")] for ln in lines[2:4])
    assert c1[p95].endswith("*") and not c8[p95].endswith("*") and not c1[head.index("TTFT mean (s)")].endswith("*")
    (note,) = thin_notes([rows[:2], rows[2:]])
    assert note.startswith("* p95 from 2 request(s) per pass, fewer than 20")


def test_a_label_is_never_drawn_over_another_points_marker():
    """Run-vs-sweep Pareto panels: A's C=8 point sits just left of B's; its label (5 pt right of
    it) fell on B's marker and was hidden under it. Each label now clears every other point and
    every label placed before it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from slurm_ab.report.figstyle import place_labels

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 30)
    items = [(50, 24.4, "C=8", "tab:blue"), (52, 24.8, "C=8", "tab:orange"), (80, 5, "C=1", "tab:orange")]
    for x, y, _, c in items:
        ax.plot([x], [y], "o", color=c, markersize=9)
    labels = place_labels(ax, items)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [a.get_window_extent(r) for a in labels]
    radius = 9 / 2 * fig.dpi / 72                     # the markers' radius in pixels
    for i, (box, (x, y, _, _)) in enumerate(zip(boxes, items)):
        for j, (ox, oy, _, _) in enumerate(items):
            if j != i:                                   # the marker's disc and the label's box
                mx, my = ax.transData.transform((ox, oy))
                dx, dy = max(box.x0 - mx, 0, mx - box.x1), max(box.y0 - my, 0, my - box.y1)
                assert math.hypot(dx, dy) > radius, (i, j, box, (mx, my))
        assert not any(box.overlaps(b) for b in boxes[:i]), i
    plt.close(fig)
