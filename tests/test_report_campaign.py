"""The campaign page: real campaigns of the local cluster (tests/fixtures/report-campaign: an A/B
of tp32 vs tp32-dflash with 3 repeats at C=8, and a tp32 sweep over C=1,8 with repeats; per
request only TTFT and the sum of the ITLs are kept)."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers.curves import cdf_at
from helpers import ROOT
from helpers.report_pages import tables
from slurm_ab.collect import read_summary
from slurm_ab.model.rundir import Layout
from slurm_ab.report import campaign as rc
from slurm_ab.report import series

FIX = ROOT / "tests" / "fixtures" / "report-campaign"


@pytest.fixture
def camps(tmp_path):
    for d in FIX.iterdir():
        shutil.copytree(d, tmp_path / d.name)
    return {d.name: tmp_path / d.name for d in tmp_path.iterdir()}


def _summary(d):
    """summary.json as other programs read it (aggregates, comparisons)."""
    return json.loads(Layout(d).summary("json").read_text())


def test_campaign_page_plots_and_tables(camps):
    from slurm_ab.report import write_run_report
    d = camps["camp-ab"]
    changed = write_run_report(d)
    names = sorted(p.name for p in (d / "plots").iterdir())
    assert names == ["decode-cdf.png", "forest-tp32-dflash-vs-tp32-c8.png", "interactivity.png",
                     "latency-cdf.png", "launch1-decode.png", "launch1-phases.png", "launch2-decode.png",
                     "launch2-phases.png", "passes.png"]
    assert d / "report.html" in changed and write_run_report(d) == []
    text = (d / "report.html").read_text()
    assert text.count("data:image/png;base64,") == 9
    # the modes' settings side by side, DFlash's flags first (they differ)
    settings = text[text.index("Settings of each mode"):text.index("<h2>Plots")]
    assert settings.index("speculative-algorithm") < settings.index("chunked-prefill-size")
    assert "mem-fraction-static" in settings
    # the page's tables are summary.md's, cell for cell
    md_tables = [[[c.strip().replace("**", "") for c in ln.strip().strip("|").split("|")] for ln in block.splitlines()
                  if ln.startswith("|") and not set(ln) <= set("|-: ")]
                 for block in Layout(d).summary("md").read_text().split("\n\n") if block.startswith("|")]
    assert tables(text)[:2] == md_tables and len(md_tables) == 2
    # then the latency percentiles per (mode, C), the ok passes pooled, and the settings table
    assert tables(text)[2][0] == ["Run", "Metric", "n", "mean", "p50", "p90", "p95", "p99", "min", "max", "std"]
    assert tables(text)[3][0] == ["setting", "tp32", "tp32-dflash"]


def test_forest_of_the_campaign_holds_the_comparison_intervals(camps):
    from slurm_ab.report import plots
    s = _summary(camps["camp-ab"])
    cmp = s["comparisons"][0]
    rows = [r for r in cmp["metrics"] if r["change_pct"] is not None]
    fig = plots.fig_forest(rows)
    lines = {ln.get_gid(): list(ln.get_xdata()) for ln in fig.axes[0].lines if ln.get_gid()}
    for y, r in enumerate(rows):
        assert lines[f"pt-{y}"] == pytest.approx([r["change_pct"]])
        if r["ci_low_pct"] is not None:
            assert lines[f"ci-{y}"] == pytest.approx([r["ci_low_pct"], r["ci_high_pct"]])
    assert any(r["verdict"].startswith("worse") for r in rows)


def test_sweep_points_are_the_aggregates_with_their_intervals(camps):
    s = _summary(camps["camp-sweep"])
    pts = rc.sweep_points(read_summary(camps["camp-sweep"]))
    assert sorted(p["concurrency"] for p in pts) == sorted(s["campaign"]["concurrencies"])
    for p in pts:
        agg = next(a for a in s["aggregates"] if a["concurrency"] == p["concurrency"])["metrics"]
        # the primary (steady-state output tok/s: every ok pass has it) first, the makespan beside it
        assert p["primary"] == "output tok/s, steady state" and p["makespan_tps"] == agg["output_tps"]["mean"]
        st = agg["steady_output_tps"]
        assert p["output_tps"] == st["mean"] and (p["output_tps_lo"], p["output_tps_hi"]) == (st["ci_low"], st["ci_high"])
        assert p["tpot_ms"] == agg["tpot_mean_ms"]["mean"]
    from slurm_ab.report import write_run_report
    write_run_report(camps["camp-sweep"])
    assert (camps["camp-sweep"] / "plots" / "sweep.png").exists()


def test_pooled_cdf_of_a_campaign_hits_its_p95(camps):
    d = camps["camp-ab"]
    curves = rc.pooled_curves(d, read_summary(d))
    assert [c["label"] for c in curves] == ["tp32 C=8 (3 passes)", "tp32-dflash C=8 (3 passes)"]
    for c in curves:
        xs, ys = c["ttft"]
        assert len(xs) == 3 * 40
        assert cdf_at(xs, ys, c["ttft_p"]["p95"]) == pytest.approx(0.95)
        assert cdf_at(*c["e2e"], c["e2e_p"]["p50"]) == pytest.approx(0.5)
