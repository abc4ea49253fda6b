"""report.html in a real headless browser (Debian's chromium, installed by `make setup`): the
pages of the three seed modes and of the failed 0.86 OOM run (real runs of the local cluster,
tests/fixtures/report), a comparison and a multi-run page. Every image must decode (non-zero
natural size), the page must run no script of its own, the tables Chromium built must hold
summary.json's numbers; full-page screenshots are saved (to $SLURM_AB_SCREENSHOTS if set) for a
person to look at."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from slurm_ab.model.experiment import instance_name

from helpers import ROOT
from helpers.report_pages import chromium, expected_cells, load, main_row, screenshot, tables
from slurm_ab.model.rundir import Layout

FIX = ROOT / "tests" / "fixtures" / "report"

if chromium() is None:
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing in CI (make setup installs Debian's chromium)")
    pytest.skip("chromium not installed (make setup)", allow_module_level=True)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from helpers.rundir_builder import collect_one as collect_run
    from slurm_ab.tables.paired import paired_text
    from slurm_ab.tables.runs import runs_text
    from slurm_ab.report import render_compare_html, render_runs_html, write_run_report

    root = tmp_path_factory.mktemp("pages")
    res = root / "results"
    shutil.copytree(FIX, res)
    out = {}
    for d in sorted(res.iterdir()):
        write_run_report(d)
        out[d.name] = d / "report.html"
    # the tables as `slurm-ab compare` / `report` print them (the collector's pure entry points)
    a, b = collect_run(res / "dev-tp32"), collect_run(res / "dev-tp32-dflash")
    (root / "compare.html").write_text(render_compare_html(res / "dev-tp32", res / "dev-tp32-dflash",
                                                           paired_text(a, b, "md"), base_dir=root))
    out["compare"] = root / "compare.html"
    dirs = sorted(res.iterdir())
    for d in sorted((ROOT / "tests" / "fixtures" / "report-campaign").iterdir()):   # campaigns
        shutil.copytree(d, res / d.name)
        write_run_report(res / d.name)
        out[d.name] = res / d.name / "report.html"
    # the history page: every run, and the campaigns linked
    # as `slurm-ab report --html` draws it: oldest first, with each run's date and workload
    from slurm_ab.report.select import select, submitted
    hist = select(dirs)
    (root / "runs.html").write_text(render_runs_html(
        hist, runs_text([collect_run(d) for d in hist], "md", dates=[submitted(d) for d in hist]),
        base_dir=root, campaigns=[res / "camp-ab", res / "camp-sweep"]))
    out["runs"] = root / "runs.html"
    # a run (C=8) against a sweep campaign (C=1, 8): compared at C=8, as `slurm-ab compare` does
    from slurm_ab.cli import campaign as campaign_cli
    sides = campaign_cli.pair([str(res / "dev-tp32"), str(res / "camp-sweep")], lambda r: Path(r))
    from slurm_ab.ab_stats import METRIC_BY_NAME
    forests = {e["concurrency"]: [dict(r, label=METRIC_BY_NAME[r["metric"]].label) for r in e["metrics"]
                                  if r.get("change_pct") is not None and r["metric"] in METRIC_BY_NAME]
               for e in json.loads(campaign_cli.pair_text(sides, "json"))["by_concurrency"]}
    (root / "compare-campaign.html").write_text(render_compare_html(
        res / "dev-tp32", res / "camp-sweep", campaign_cli.pair_text(sides, "md"), base_dir=root,
        forests=forests))
    out["compare-campaign"] = root / "compare-campaign.html"
    # a slow node in replica 1 (tests/fixtures/runs/slow-node, stored as the job wrote it): the
    # collector's verdict names it; the page shows each replica's TPOT and server metrics
    from slurm_ab.collect import collect_and_write
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "slow-node", res / "slow-node", symlinks=True)
    collect_and_write(res / "slow-node")
    write_run_report(res / "slow-node")
    out["slow-node"] = res / "slow-node" / "report.html"
    # a run whose client output is missing, with a site's routine NCCL and teardown lines (issue 32:
    # its Diagnosis led with them); no client output: a cheap page
    from helpers.rundir_builder import without_client_output
    # collected with sacct's record of another job (a reused job id): the page says it was ignored
    from slurm_ab.collect import collect
    from slurm_ab.collect.write import write_summary
    without_client_output(res / "dev-tp32", root / "no-client")
    write_summary(collect(root / "no-client", sacct={"job_id": "1", "job_name": "wrap", "state": "COMPLETED"}),
                  root / "no-client")
    write_run_report(root / "no-client")
    out["no-client"] = root / "no-client" / "report.html"
    return out


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = os.environ.get("SLURM_AB_SCREENSHOTS")
    return Path(d) if d else tmp_path_factory.mktemp("screenshots")


NAMES = ("dev-tp32", "dev-pp8", "dev-tp32-dflash", "dev-oom", "slow-node", "compare", "compare-campaign",
         "runs", "camp-ab", "camp-sweep", "no-client")


@pytest.mark.parametrize("name", NAMES)
def test_page_renders_in_chromium(name, pages, shots):
    page = pages[name]
    probe, dom = load(page)
    n_img = page.read_text().count("<img ")
    assert len(probe["imgs"]) == n_img >= 1
    for im in probe["imgs"]:
        assert im["complete"] and im["w"] > 0 and im["h"] > 0, im      # decoded
    assert probe["scripts"] == 1                                       # only the test's probe
    shot = screenshot(page, shots / f"{name}.png", probe["height"] + 20)
    assert shot.stat().st_size > 10_000
    if name.startswith("camp-"):
        summary = json.loads(Layout(page.parent).summary("json").read_text())
        agg = {(r[0], r[1]): r for r in tables(dom)[0][1:]}              # the aggregates table
        for a in summary["aggregates"]:
            row = agg[(a["mode"], str(a["concurrency"]))]
            assert row[2] == f"{a['passes_ok']}/{a['passes']}"
            m = a["metrics"]["output_tps"]
            hw = m["half_width"]
            assert row[4] == (f"{m['mean']:.2f} ± {hw:.2f}" if hw is not None else f"{m['mean']:.2f}")
    if name == "runs":                                                 # campaigns listed and linked
        assert "camp-ab" in page.read_text() and 'href="results/camp-sweep/report.html"' in page.read_text()
        assert 'data-plot="interactivity"' in page.read_text()
    if name == "compare-campaign":                                     # no pooling of C=1 and C=8
        text = page.read_text()
        assert "not collected" not in text and 'data-plot="forest-c8"' in text
        assert 'data-plot="latency-cdf"' in text and "compared at concurrency 8 only" in text
    if name == "slow-node":
        (summary,) = json.loads(Layout(page.parent).summary("json").read_text())["passes"]
        assert summary["verdict"] == "invalid" and "replica 1" in summary["reasons"][0]
        text = page.read_text()
        for plot in ("replica-tpot", "server-metrics", "decode-cdf", "request-timeline"):
            assert f'data-plot="{plot}.png"' in text, plot
    if name.startswith("dev-"):
        (summary,) = json.loads(Layout(page.parent).summary("json").read_text())["passes"]
        row = main_row(dom)                                            # the browser's DOM
        for k, v in expected_cells(summary).items():
            assert row[k] == v, (name, k)
        head, *rows = tables(dom)[1]                                   # the replicas table
        reps = {r[0]: dict(zip(head, r)) for r in rows}
        for r in summary["replicas"]:
            # a summary written before every mode had roles names a replica by its index
            cells = reps[str(r["replica"]) if r.get("role") is None else instance_name(r["role"], r["instance"])]
            assert cells["decode samples"] == str(r["decode_samples"])
            served = r["requests_served"]
            assert cells["requests"].startswith(str(served) if served is not None else "-")


def test_plot_files_match_the_embedded_images(pages):
    import base64
    import re
    for name in ("dev-tp32", "dev-oom"):
        page = pages[name]
        text = page.read_text()
        embedded = {m.group(1): base64.b64decode(m.group(2)) for m in
                    re.finditer(r'data-plot="([^"]+)" src="data:image/png;base64,([^"]+)"', text)}
        files = {p.name: p.read_bytes() for p in (page.parent / "plots").glob("*.png")}
        assert embedded == files and files


def _body(dom: str) -> str:
    return dom[dom.index("<body>") + len("<body>"):].lstrip()


def _caption(text: str, plot: str) -> str:
    """The caption of the figure whose image is `plot` (report.html.img: <figure><img><figcaption>)."""
    import re
    m = re.search(r'data-plot="' + re.escape(plot) + r'"[^>]*>\s*<figcaption[^>]*>(.*?)</figcaption>', text, re.S)
    assert m, plot
    import html
    return html.unescape(m.group(1))


def test_compare_and_campaign_pages_answer_first(pages):
    """The answer line (primary metric, change, interval, verdict coloured by its kind, what it
    rests on) is the first thing of every compare and campaign page, as Chromium built it."""
    from slurm_ab.ab_stats.verdicts import colour
    want = {"camp-ab": ("worse (within-launch only)", "worse", "tp32-dflash vs tp32 at C=8"),
            "compare": (None, None, "dev-tp32-dflash vs dev-tp32"),
            "compare-campaign": ("inconclusive (n=1)", "inconclusive", " vs dev-tp32 at C=8"),
            "camp-sweep": ("ok", "ok", "(tp32, C=1,8)")}
    for name, (verdict, kind, subject) in want.items():
        _, dom = load(pages[name])
        body = _body(dom)
        assert body.startswith('<section class="answers">'), (name, body[:200])
        first = body[:body.index("</div>")]
        assert subject in first and "rests on" in first, (name, first)
        if verdict is not None:                     # the verdict word, coloured by its kind
            assert f'data-kind="{kind}"' in first and f">{verdict}</span>" in first, (name, first)
            if kind != "ok":
                assert f'style="background:{colour(verdict)}"' in first, (name, first)


def test_each_misleading_case_of_issue_32_is_fixed_on_its_page(pages):
    """Each case the review found, on the page that showed it (the figures' artists are tested in
    test_report_charts/test_report_plots; here what the page says of them)."""
    text = {n: pages[n].read_text() for n in NAMES}
    # request timeline: each request its own access line (one-to-one), the pp8 and dflash runs
    for name in ("dev-pp8", "dev-tp32-dflash"):
        assert "each request's own access line" in _caption(text[name], "request-timeline.png")
    # forest colours for every verdict form, and the legend says them
    assert "red: B is worse" in text["camp-ab"] and 'data-plot="forest-tp32-dflash-vs-tp32-c8.png"' in text["camp-ab"]
    # charts of the primary (steady state) beside the makespan
    assert "(the comparisons' primary metric) first, the makespan" in _caption(text["camp-ab"], "passes.png")
    assert "hollow markers: the makespan output tok/s" in _caption(text["camp-ab"], "interactivity.png")
    assert "hollow markers: the makespan output tok/s" in _caption(text["camp-sweep"], "sweep.png")
    # scrape series as steps
    assert "drawn as a step held until the next scrape" in _caption(text["slow-node"], "server-metrics.png")
    # run-vs-sweep: a point under another stays visible; the panels say what they leave out
    cap = _caption(text["compare-campaign"], "interactivity")
    assert "A's markers larger" in cap and "TTFT and E2E" in cap
    # the sacct identity note on the page
    assert "note: sacct ignored: Slurm&#x27;s job 1 is another job (its name is wrap" in text["no-client"]
    # diagnosis: what is abnormal for this run, the routine lines apart
    diag = text["no-client"][text["no-client"].index("<h2>Diagnosis</h2>"):]
    assert "No line of the logs explains the verdict" in diag and "<h3>nccl_net" not in diag
    # the teardown's 'task N: Killed' lines are no reason of the verdict either: the missing output is
    verdict = text["no-client"][:text["no-client"].index("<h2>Results</h2>")]
    assert "Killed" not in verdict and "no benchmark result" in verdict
    assert diag.index("Routine lines") < diag.index("No device found") and "CANCELLED AT" in diag
    assert text["dev-oom"].index("<h3>oom") < text["dev-oom"].index("Routine lines")
    # history: oldest first, with date and workload columns; runs are points, never joined
    head, *rows = tables(text["runs"])[0]
    assert head[:3] == ["Run", "Submitted", "Workload"], head
    dates = [r[1] for r in rows]
    assert dates == sorted(dates) and len(set(dates)) > 1
    assert {r[0]: r[2] for r in rows}["dev-tp32"].endswith("C=8, 40 prompts")
    assert "separate runs are points, never joined" in _caption(text["runs"], "interactivity")
    # sweeps: bands named, thin percentiles warned
    assert "named by its concurrency and repeat" in _caption(text["camp-sweep"], "launch1-phases.png")
    assert "named by its concurrency and repeat" in _caption(text["camp-sweep"], "launch1-decode.png")
    assert "* p95 from 2 request(s) per pass" in text["camp-sweep"]


def test_the_new_views_are_on_their_pages(pages):
    """Per-request latency over time, throughput per GPU against TTFT and E2E, errors and goodput
    against concurrency, the percentile table per metric."""
    text = {n: pages[n].read_text() for n in NAMES}
    assert "each request's TTFT, E2E and TPOT at its start" in _caption(text["dev-tp32"], "request-timeline.png")
    assert "each request's TTFT, E2E and TPOT at its start" in _caption(text["camp-sweep"], "launch1-decode.png")
    assert "TTFT and E2E per mode and concurrency" in _caption(text["camp-sweep"], "interactivity.png")
    assert "failed requests" in _caption(text["camp-sweep"], "load.png")
    # the percentile table per metric: a run's, a campaign's (mode, C) pooled, A and B of a comparison
    for name, label in (("dev-tp32", "tp32"), ("camp-sweep", "tp32 C=1 (2 passes)"), ("compare", "A dev-tp32")):
        i = text[name].index("<h2>Latency percentiles")
        tab = tables(text[name][i:])[0]
        assert tab[0] == ["Run", "Metric", "n", "mean", "p50", "p90", "p95", "p99", "min", "max", "std"], name
        first = [r[1] for r in tab[1:] if r[0] == tab[1][0]]      # ITL when the details hold it
        assert first in (["TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (s)"], ["TTFT (ms)", "TPOT (ms)", "E2E (s)"])
        assert tab[1][0].startswith(label), (name, tab[1][0])
    assert "* p95 of fewer than 20 values" in text["camp-sweep"]          # C=1: 2 requests per pass
