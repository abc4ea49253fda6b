"""The data behind the report's plots, on real run directories captured from the local cluster
(tests/fixtures/report: tp32, pp8, tp32-dflash and the 0.86 OOM; bench.jsonl without the
generated texts, node rank 0's server logs)."""
from __future__ import annotations

from collections import Counter

import json
import shutil
from pathlib import Path

import pytest

from helpers.curves import cdf_at
from helpers import ROOT
from helpers.report_pages import expected_cells, main_row
from slurm_ab.report import rundata, series

FIX = ROOT / "tests" / "fixtures" / "report"
OK_RUNS = ("dev-tp32", "dev-pp8", "dev-tp32-dflash")
from slurm_ab.model.rundir import Layout, OldRunLayout


@pytest.fixture
def runs(tmp_path):
    """Copies of the fixture runs (report files are written into the copies)."""
    out = {}
    for d in FIX.iterdir():
        shutil.copytree(d, tmp_path / d.name)
        out[d.name] = tmp_path / d.name
    return out


def _summary(d: Path) -> dict:
    """The one pass's record of a stored run's summary.json."""
    (one,) = json.loads(Layout(d).summary("json").read_text())["passes"]
    return one


@pytest.mark.parametrize("name", OK_RUNS)
def test_cdf_hits_half_and_095_at_the_reported_p50_and_p95(name):
    run = rundata.load(FIX / name)
    lat = series.request_latencies(run.record)
    s = _summary(FIX / name)["bench"]
    assert len(lat["ttft"]) == s["completed"] == 40
    for key in ("ttft", "e2e"):
        xs, ys = series.cdf_points(lat[key])
        assert ys[0] == 0.0 and ys[-1] == 1.0 and xs == sorted(xs)
        assert cdf_at(xs, ys, s[key]["p95"]) == pytest.approx(0.95, abs=1e-9)
        assert cdf_at(xs, ys, s[key]["p50"]) == pytest.approx(0.50, abs=1e-9)


def test_cdf_markers_sit_on_the_curve_at_the_table_values():
    from slurm_ab.report import html, plots
    run = rundata.load(FIX / "dev-tp32")
    fig = plots.fig_cdfs([html.cdf_curve(run)])
    s = _summary(FIX / "dev-tp32")["bench"]
    marks = {ln.get_gid(): ln.get_xydata()[0] for ax in fig.axes for ln in ax.lines if ln.get_gid()}
    assert marks["ttft-p95-0"] == pytest.approx([s["ttft"]["p95"] / 1000, 0.95])
    assert marks["e2e-p50-0"] == pytest.approx([s["e2e"]["p50"] / 1000, 0.5])


@pytest.mark.parametrize("name", OK_RUNS)
def test_timeline_colours_a_request_only_with_the_evidence_of_its_replica(name):
    """Requests and access lines are matched one to one: a request is coloured by a replica only
    when every matching gives it a line of that replica, its arrival tick is its own line (no
    line cited twice); the others are grey (replica unknown), and the page says how many."""
    from matplotlib.colors import to_hex

    from slurm_ab.report import plots
    run = rundata.load(FIX / name)
    tl = series.timeline(run)
    summ = _summary(FIX / name)
    assert sorted(r.index for r in tl.requests) == list(range(40))
    fig = plots.fig_timeline(tl)
    bars = [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("req-")]
    assert sorted(int(p.get_gid()[4:]) for p in bars) == list(range(40))     # one bar each
    colour = {int(p.get_gid()[4:]): to_hex(p.get_facecolor()) for p in bars}
    access = [(run.seconds(t), g) for t, g in series._bench_access(run)]
    tol = float(tl.method.split("within ")[1].split(" ms")[0]) / 1000
    arrivals = [r.arrival for r in tl.requests if r.arrival is not None]
    assert len(arrivals) == len(set(arrivals))                              # one line, one request
    for r in tl.requests:
        if r.replica is None:
            assert r.arrival is None and colour[r.index] == plots.replica_color(None)
        else:
            assert (r.arrival, r.replica) in access and abs(r.arrival - r.start) <= tol + 1e-9
            assert colour[r.index] == plots.replica_color(r.replica)
    served = {r["replica"]: r["requests_served"] for r in summ["replicas"]}
    counts = Counter(r.replica for r in tl.requests)
    lines = Counter(g for _, g in access)
    assert all(counts.get(g, 0) <= min(n, lines[g]) for g, n in served.items())   # never more than served
    unknown = counts.get(None, 0)
    assert (f"{unknown} request(s) could have been served by either replica" in tl.method) == bool(unknown)


def test_simultaneous_starts_never_share_an_access_line():
    """The issue's pp8 run: its first 8 requests start together, replica 0's 4 lines fall within
    the window and replica 1's 4 just outside it. Citing the same lines 8 times drew all 8 on
    replica 0 while each replica served 4 of them; one to one, none can be told (grey)."""
    tl = series.timeline(rundata.load(FIX / "dev-pp8"))
    assert [r.replica for r in tl.requests[:8]] == [None] * 8
    assert series.attribute([0.0] * 8, [(0.01 * k, 0) for k in range(4)] + [(0.2 + 0.01 * k, 1) for k in range(4)],
                            0.05) == [None] * 8


def test_one_to_one_matching_tells_what_the_lines_force():
    """A request whose only line is replica 0's takes it; the next one, near that line and one of
    replica 1's, must then have replica 1's; lines of both replicas that could go either way stay
    grey; a request with no line in its window stays grey."""
    lines = [(0.00, 0), (0.04, 1), (1.00, 0), (1.01, 1), (1.02, 0)]
    got = series.attribute([-0.03, 0.03, 1.0, 1.01, 5.0], lines, 0.05)
    assert got[:2] == [(0, 0.00), (1, 0.04)]
    assert got[2:] == [None, None, None]
    assert series.attribute([0.0, 0.0], [(0.0, 1), (0.01, 1)], 0.05) == [(1, 0.0), (1, 0.01)]


def test_requests_that_start_alone_are_all_attributed():
    """DFlash's variable acceptance staggers the requests: most start alone and are attributed."""
    tl = series.timeline(rundata.load(FIX / "dev-tp32-dflash"))
    assert sum(1 for r in tl.requests if r.replica is not None) >= 25


def test_a_slow_replicas_requests_are_never_guessed(tmp_path):
    """tests/fixtures/runs/slow-node: all 8 requests started together, the replicas' access lines
    interleaved: arrival order and TTFT ranks drew a slow request as replica 0 and a fast one as
    replica 1. No request is attributed now, and the caption says why."""
    from slurm_ab.collect import collect_and_write
    run_dir = tmp_path / "slow-node"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "slow-node", run_dir, symlinks=True)
    collect_and_write(run_dir, final=False)
    tl = series.timeline(rundata.load(run_dir))
    assert len(tl.requests) == 8 and all(r.replica is None for r in tl.requests)
    assert "8 request(s) could have been served by either replica" in tl.method


@pytest.mark.parametrize("name", OK_RUNS)
def test_timeline_is_consistent_with_the_client(name):
    run = rundata.load(FIX / name)
    tl = series.timeline(run)
    conc = run.record["max_concurrency"]
    assert max(n for _, n in tl.concurrency) == conc          # the client's limit, never more
    assert tl.concurrency[-1][1] == 0
    lat = series.request_latencies(run.record)
    for r in tl.requests:
        k = lat["index"].index(r.index)
        assert r.first_token - r.start == pytest.approx(lat["ttft"][k] / 1000)
        assert r.end - r.start == pytest.approx(lat["e2e"][k] / 1000)
        assert r.arrival is None or abs(r.arrival - r.start) < 0.25       # server saw it then
    # the benchmark's span: first start to last end is the client's own duration (+ stream close)
    span = max(r.end for r in tl.requests) - min(r.start for r in tl.requests)
    assert span == pytest.approx(run.record["duration"], abs=0.05)
    assert tl.residual_ms < 250
    first = [r for r in tl.requests if r.start - tl.requests[0].start < series.TIE_S]
    assert len(first) == conc


def test_replay_of_a_fifo_semaphore():
    assert series.replay_starts([3.0, 1.0, 1.0, 1.0], 2) == [0.0, 0.0, 1.0, 2.0]
    assert series.replay_starts([1.0, 1.0], None) == [0.0, 0.0]
    assert series.concurrency_steps([(0.0, 1.0), (0.0, 2.0), (1.0, 3.0)]) == [(0.0, 2), (1.0, 2), (2.0, 1), (3.0, 0)]


def test_decode_series_and_windows_of_a_speculative_run():
    run = rundata.load(FIX / "dev-tp32-dflash")
    dec = series.decode_series(run)
    assert set(dec) == {0, 1}
    assert all(v is not None for d in dec.values() for v in d["accept"])
    w = series.windows(run)
    assert w["benchmark"][0][0] == 0.0 and w["benchmark"][0][1] > 10
    assert len(w["warmup"]) == 2 and all(s < e < 0 for s, e in w["warmup"])
    # pipeline stages print the same batch: one stream kept (pp8 has PP0 and PP1 on rank 0)
    pp = rundata.load(FIX / "dev-pp8")
    assert len(pp.decode[0]) > 10
    assert len({p.ts for p in pp.decode[0]}) == len(pp.decode[0])


def test_failed_run_timeline_is_the_job_phases_up_to_the_failure():
    run = rundata.load(FIX / "dev-oom")
    tl = series.timeline(run)
    assert tl.requests == () and tl.failure is not None
    lanes = dict(series.phases(run))
    assert [p for p, _, _ in lanes["replica 0"]] == ["loading", "warm-up"]
    warm = lanes["replica 0"][1]
    assert warm[2] is not None and warm[2] <= tl.failure
    assert "client" not in lanes


def test_forest_rows_from_ab_stats_and_pareto_front():
    from slurm_ab.ab_stats import deltas
    from slurm_ab.report import plots
    a = [{"output_tps": 100.0 + i, "ttft_mean_s": 1.0 + i / 100} for i in range(4)]
    b = [{"output_tps": 120.0 + i, "ttft_mean_s": 0.9 + i / 100} for i in range(4)]
    rows = [d.to_dict() for d in deltas(a, b) if d.change_pct is not None]
    fig = plots.fig_forest(rows)
    ci = {ln.get_gid(): ln.get_xdata() for ln in fig.axes[0].lines if (ln.get_gid() or "").startswith("ci-")}
    assert len(ci) == len(rows) == 2
    for y, r in enumerate(rows):
        assert list(ci[f"ci-{y}"]) == pytest.approx([r["ci_low_pct"], r["ci_high_pct"]])
        assert r["ci_low_pct"] < r["change_pct"] < r["ci_high_pct"]
    assert plots.pareto_front([(1, 10), (2, 20), (3, 15), (2.5, 20)]) == [0, 1]


def test_sweep_plot_marks_the_pareto_front():
    from slurm_ab.report import plots
    pts = [{"mode": m, "concurrency": c, "output_tps": tps, "tpot_ms": tp, "ttft_s": tt,
            "output_tps_lo": tps - 5, "output_tps_hi": tps + 5}
           for m, c, tps, tp, tt in (("tp32", 4, 900, 4.0, 0.3), ("tp32", 8, 1500, 4.2, 0.5),
                                     ("pp8", 4, 700, 6.0, 0.4), ("pp8", 8, 1100, 7.5, 0.6))]
    fig = plots.fig_sweep(pts)
    front = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "pareto-tpot_ms"][0]
    assert list(front.get_xdata()) == [4.0, 4.2]


def test_html_report_tables_hold_the_summary_numbers_and_is_self_contained(runs):
    from slurm_ab.report import write_run_report
    for name, d in runs.items():
        changed = write_run_report(d)
        assert d / "report.html" in changed
        text = (d / "report.html").read_text()
        row = main_row(text)
        for k, v in expected_cells(_summary(d)).items():
            assert row[k] == v, (name, k)
        assert "<script" not in text.lower() and "http://" not in text and "https://" not in text
        pngs = sorted(p.name for p in (d / "plots").glob("*.png"))
        assert text.count('src="data:image/png;base64,') == len(pngs) >= 1
        for href in __import__("re").findall(r'href="([^"]+)"', text):
            assert not href.startswith("/") and (d / href).exists(), href     # relative, present
        assert write_run_report(d) == []                                      # idempotent


def test_failed_run_page_leads_with_the_cited_oom_and_its_log_lines(runs):
    from slurm_ab.report import write_run_report
    d = runs["dev-oom"]
    write_run_report(d)
    text = (d / "report.html").read_text()
    diag = text[text.index("<h2>Diagnosis</h2>"):]
    first = diag[:diag.index("</pre>")]
    assert f"{OldRunLayout(d).rel(OldRunLayout(d).server_log(0, 0))}</a>:124" in first and "CUDA out of memory" in first
    assert '<span class="hl">   124  ' in first
    assert sorted(p.name for p in (d / "plots").glob("*.png")) == ["phases.png"]


def test_compare_and_multi_run_pages(runs, tmp_path):
    from slurm_ab.report import render_compare_html, render_runs_html
    a, b = runs["dev-tp32"], runs["dev-tp32-dflash"]
    md = "| metric | tp32 | tp32-dflash | change |\n|---|---|---|---|\n| Input / Output TPS | 1 / 2 | 3 / 4 | +1.00% |\n"
    text = render_compare_html(a, b, md, base_dir=tmp_path)
    assert text.count("data:image/png;base64,") == 4 and "inconclusive (n=1)" in text   # CDFs x2, interactivity, forest
    assert f'href="dev-tp32/{OldRunLayout(a).rel(OldRunLayout(a).server_log(0, 0))}"' in text
    text = render_runs_html(list(runs.values()), md, base_dir=tmp_path)
    assert text.count("data:image/png;base64,") == 2 and "dev-oom" in text     # CDFs, interactivity


def test_a_run_that_died_mid_benchmark_shows_its_arrivals_up_to_the_failure(tmp_path):
    """The client's output is lost when the job dies: the timeline falls back to the servers'
    access lines, with the failure marked."""
    from slurm_ab.report import plots
    run_dir = tmp_path / "r"
    shutil.copytree(FIX / "dev-tp32", run_dir)
    (run_dir / "bench.jsonl").unlink()
    lines = (run_dir / "events.log").read_text().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if " bench_start" in ln)
    epoch, local = float(lines[start].split()[0]) + 8.0, None
    from datetime import datetime
    local = datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    (run_dir / "events.log").write_text("".join(lines[:start + 1]) +
                                        f"{epoch:.3f} {local} fail kind=step_exited step=server-r1 replica=1 rc=137\n")
    run = rundata.load(run_dir)
    tl = series.timeline(run)
    assert tl.failure is not None and tl.requests
    assert all(r.end is None and r.replica in (0, 1) for r in tl.requests)
    fig = plots.fig_timeline(tl)
    assert len([ln for ln in fig.axes[0].lines if (ln.get_gid() or "").startswith("req-")]) == len(tl.requests)
    # no request's end is known: the client's in-flight count is unknown, not arrivals piling up
    assert tl.concurrency == () and "in flight unknown" in tl.method
    assert not [ln for ln in fig.axes[1].lines if ln.get_gid() == "concurrency"]
    assert "in flight unknown" in " ".join(t.get_text() for t in fig.axes[1].texts)
    # with the servers' scrapes, their HTTP in-flight gauge is drawn instead
    fig = plots.fig_timeline(tl, server_flight=[(0.0, 8.0), (2.0, 8.0), (4.0, 6.0)])
    line = next(ln for ln in fig.axes[1].lines if ln.get_gid() == "server-in-flight")
    assert list(line.get_ydata()) == [8.0, 8.0, 6.0]


def test_forest_colours_every_verdict_form():
    """charts.fig_forest matched the verdict string exactly: 'worse (within-launch only)' and
    'inconclusive' came out grey although the caption promised green/red. Every printed form is
    coloured by its kind (ab_stats.verdicts), the primary first and bold."""
    from matplotlib.colors import to_hex
    from slurm_ab.ab_stats.verdicts import KINDS
    from slurm_ab.report import plots
    forms = {"better": "better", "worse (within-launch only)": "worse", "better (separate jobs)": "better",
             "equivalent within ±3%": "equivalent", "no significant difference (within-launch only)": "same",
             "inconclusive (n=1)": "inconclusive", "inconclusive (no spread)": "inconclusive"}
    rows = [{"metric": f"m{i}", "label": f"m{i}", "change_pct": 1.0, "ci_low_pct": 0.5, "ci_high_pct": 1.5,
             "verdict": v, "role": "primary" if i == 0 else "secondary"} for i, v in enumerate(forms)]
    fig = plots.fig_forest(rows)
    ax = fig.axes[0]
    pts = {ln.get_gid(): to_hex(ln.get_color()) for ln in ax.lines if (ln.get_gid() or "").startswith("pt-")}
    for y, kind in enumerate(forms.values()):
        assert pts[f"pt-{y}"] == KINDS[kind][1], (y, kind)
    assert ax.get_yticklabels()[0].get_text().endswith("(primary)")
    assert ax.get_yticklabels()[0].get_fontweight() == "bold"
