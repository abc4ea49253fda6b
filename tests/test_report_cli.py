"""`slurm-ab report` filters and --html, `compare --html`, report.html written by collect; the
fast paths never import matplotlib. Runs: the captured runs of tests/fixtures/report (no Slurm:
PATH holds no sacct, the verdicts come from the files)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from slurm_ab.model.rundir import Layout

from helpers import ROOT

FIX = ROOT / "tests" / "fixtures" / "report"


@pytest.fixture
def results(tmp_path, monkeypatch):
    res = tmp_path / "results"
    shutil.copytree(FIX, res)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("SLURM_AB_RESULTS", raising=False)
    # submission times: oom yesterday, the others today (manifest.submitted_at)
    for name, stamp in (("dev-oom", "2026-11-29T10:00:00+0000"), ("dev-tp32", "2026-11-30T14:57:29+0000")):
        p = res / name / "manifest.json"
        m = json.loads(p.read_text())
        m["submitted_at"] = stamp
        p.write_text(json.dumps(m))
    return res


def _runs(out: str) -> list[str]:
    """The runs of the table printed (--format md: whole)."""
    first = out.split("\n\n")[0].splitlines()
    return [ln.split("|")[1].strip() for ln in first[2:] if ln.startswith("|")]


def test_report_filters(cli, results):
    code, out, _ = cli("report", "--format", "md")
    # the history: oldest first (dev-tp32 was submitted at 14:57:29, dev-pp8 at 14:58)
    assert code == 0 and _runs(out) == ["dev-oom", "dev-tp32", "dev-pp8", "dev-tp32-dflash"]
    # a table draws no page (listing a history stays fast); collect and --html do
    assert not list(results.glob("*/report.html")) and not list(results.glob("*/plots"))
    assert _runs(cli("report", "--format", "md", "--verdict", "failed")[1]) == ["dev-oom"]
    assert _runs(cli("report", "--format", "md", "--mode", "tp32-dflash")[1]) == ["dev-oom", "dev-tp32-dflash"]
    assert _runs(cli("report", "--format", "md", "--mode", "tp32-dflash", "--verdict", "ok")[1]) == ["dev-tp32-dflash"]
    assert "dev-oom" not in _runs(cli("report", "--format", "md", "--since", "2026-11-30")[1])
    assert _runs(cli("report", "--format", "md", "--since", "2026-11-29T09:00:00+00:00", "--mode", "tp32-dflash",
                     "--verdict", "failed")[1]) == ["dev-oom"]
    code, _, err = cli("report", "--format", "md", "--since", "2099-01-01")
    assert code == 2 and "no runs matching the filters" in err
    code, _, err = cli("report", "--format", "md", "--since", "last tuesday")
    assert code == 2 and "--since 'last tuesday': not a date" in err
    code, _, err = cli("report", "--format", "md", "--verdict", "great")
    assert code == 2 and "great" in err


def test_collect_writes_report_html_and_plots_once(cli, results):
    run = results / "dev-tp32"
    lay = Layout(run)
    lay.summary("json").unlink()                    # as after the job: not collected yet
    code, out, _ = cli("collect", str(run))
    assert code == 0 and lay.report_html.name in out
    assert sorted(p.name for p in lay.plots.iterdir()) == [
        "decode-cdf.png", "decode.png", "latency-cdf.png", "phases.png", "request-timeline.png"]
    before = lay.report_html.read_bytes()
    code, out, _ = cli("collect", str(run))
    assert "summary files unchanged" in out and lay.report_html.read_bytes() == before


def test_collect_no_report_leaves_the_page_to_the_next_collect(cli, results):
    run = results / "dev-tp32"
    lay = Layout(run)
    for f in (lay.summary("json"), lay.report_html):
        f.unlink(missing_ok=True)
    code, out, _ = cli("collect", str(run), "--no-report")
    assert code == 0 and lay.summary("json").name in out and lay.report_html.name not in out
    assert lay.summary("json").exists() and not lay.report_html.exists()
    code, out, _ = cli("collect", str(run))                # the summary is unchanged, the page missing
    assert code == 0 and lay.report_html.name in out and lay.report_html.exists()


def test_report_and_compare_html(cli, results, tmp_path):
    page = tmp_path / "out" / "runs.html"
    page.parent.mkdir()
    code, out, err = cli("report", "--verdict", "ok", "--html", str(page))
    assert code == 0 and f"wrote {page}" in err
    # the page links each run's own page: --html draws those that are missing
    assert sorted(p.parent.name for p in results.glob("*/report.html")) == ["dev-pp8", "dev-tp32", "dev-tp32-dflash"]
    text = page.read_text()
    assert "dev-tp32-dflash" in text and "dev-oom" not in text
    assert 'href="../results/dev-tp32/logs/server-r0-n0.log"' in text
    cmp = tmp_path / "out" / "cmp.html"
    code, out, err = cli("compare", "dev-tp32", "dev-tp32-dflash", "--html", str(cmp), "--format", "md")
    assert code == 0 and "Input / Output TPS" in out
    text = cmp.read_text()
    # the compare table's cells are the printed markdown's cells
    for line in out.splitlines()[4:]:
        if line.startswith("|") and not set(line) <= set("|-: "):
            for cell in line.strip("|").split("|"):
                assert f">{cell.strip()}<" in text, cell
    import re
    assert re.findall(r'data-plot="([^"]+)"', text) == ["latency-cdf", "decode-cdf", "interactivity", "forest"]
    assert "Settings side by side" in text and "speculative-algorithm" in text     # DFlash's flags


@pytest.mark.parametrize("args", [["--help"], ["report", "--help"], ["watch", "--help"],
                                  ["dry-run", "tp32"]])
def test_fast_paths_do_not_import_plotting(args):
    code = ("import sys; from slurm_ab.cli.main import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', [m for m in ('matplotlib', 'tqdm', 'numpy', 'pandas') if m in sys.modules],"
            " file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY []" in r.stderr, r.stderr[-2000:]


def test_campaign_report_and_compare_html(cli, results, tmp_path):
    for d in (ROOT / "tests" / "fixtures" / "report-campaign").iterdir():
        shutil.copytree(d, results / d.name)
    page = tmp_path / "camp.html"
    code, out, err = cli("report", "camp-ab", "--html", str(page))
    assert code == 0 and f"wrote {page}" in err and "Aggregates" in out
    text = page.read_text()
    assert "Campaign camp-ab" in text and 'data-plot="forest-tp32-dflash-vs-tp32-c8.png"' in text
    assert 'href="results/camp-ab/launch1-tp32/bench-c8-r1.jsonl"' in text
    code, out, err = cli("compare", "camp-ab", "--html", str(tmp_path / "c1.html"))
    assert code == 0 and (tmp_path / "c1.html").read_text() == text
    # a run at C=8 against a sweep (C=1 and C=8): compared at C=8 only, never pooled; the campaign
    # side has its verdict and its C=8 CDF
    code, out, err = cli("compare", "dev-tp32", "camp-sweep", "--html", str(tmp_path / "c2.html"))
    assert code == 0, err
    assert "compared at concurrency 8 only" in out and "(n=2," in out
    text = (tmp_path / "c2.html").read_text()
    assert 'data-plot="forest-c8"' in text and "Input TPS" in text and "not collected" not in text
    assert text.count('<span class="verdict v-ok">ok</span>') == 2
    assert 'data-plot="latency-cdf"' in text and 'data-plot="decode-cdf"' in text


def test_since_dates_and_run_times(tmp_path):
    from datetime import datetime, timezone

    from slurm_ab.model.errors import UsageError
    from slurm_ab.report.select import parse_since, run_time
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    assert parse_since("90m", now) == datetime(2026, 11, 30, 10, 30, tzinfo=timezone.utc)
    assert parse_since("2w", now) == datetime(2026, 11, 16, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2026-11-30T10:00:00Z") == datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc)
    assert parse_since("2026-11-30").tzinfo is not None                     # local midnight
    with pytest.raises(UsageError):
        parse_since("soon")
    run = tmp_path / "r"
    shutil.copytree(FIX / "dev-pp8", run)
    lay = Layout(run)
    m = json.loads(lay.manifest.read_text())
    assert run_time(run) == datetime.strptime(m["submitted_at"], "%Y-%m-%dT%H:%M:%S%z")
    m.pop("submitted_at")
    lay.manifest.write_text(json.dumps(m))
    first = lay.events.read_text().split()[0]                               # job_start's epoch
    assert run_time(run).timestamp() == pytest.approx(float(first))


def test_compare_never_pools_different_concurrencies(cli, results):
    """A run at C=3 against a sweep of C=1 and C=8: nothing to pair, exit 2 naming both."""
    shutil.copytree(ROOT / "tests" / "fixtures" / "report-campaign" / "camp-sweep", results / "camp-sweep")
    man = results / "dev-tp32" / "manifest.json"
    m = json.loads(man.read_text())
    m["config"]["benchmark"]["concurrency"] = 3          # as if the run had been at C=3
    man.write_text(json.dumps(m))
    code, out, err = cli("compare", "dev-tp32", "camp-sweep")
    assert code == 2, out + err
    assert "dev-tp32 ran concurrency 3 and camp-sweep ran 1, 8" in err


def test_terminal_output_fits_120_columns_and_answers_first(cli, results, monkeypatch):
    """With COLUMNS=120 nothing printed is wider than 120 (issue 32: `report` was 593 columns,
    the slow-node collect 565, run-vs-sweep compare 335, campaign 263, sweep 211); the answer line
    (tables.answer: primary metric, change, interval, verdict, what it rests on) is the first
    line of every compare and campaign output."""
    from slurm_ab.cli import campaign as campaign_cli
    from slurm_ab.collect import collect
    from slurm_ab.tables.campaign import answers
    from slurm_ab.tables.table import widest

    for d in (ROOT / "tests" / "fixtures" / "report-campaign").iterdir():
        shutil.copytree(d, results / d.name)
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "slow-node", results / "slow-node", symlinks=True)
    monkeypatch.setenv("COLUMNS", "120")
    outs = {}
    for name in ("dev-tp32", "slow-node", "camp-ab", "camp-sweep"):
        outs[f"collect {name}"] = cli("collect", name, "--no-report")
    outs["report"] = cli("report")
    for args in (("dev-tp32", "dev-tp32-dflash"), ("dev-tp32", "camp-sweep"), ("camp-ab",)):
        outs["compare " + " ".join(args)] = cli("compare", *args)
    for what, (code, out, err) in outs.items():
        assert code == 0, (what, err)
        assert out.strip() and widest(out) <= 120, (what, widest(out))
    # --format keeps machine-readable output whole (a json line is as wide as it is)
    code, out, _ = cli("compare", "dev-tp32", "camp-sweep", "--format", "json")
    assert code == 0 and json.loads(out)["by_concurrency"][0]["concurrency"] == 8

    def first(what):
        return outs[what][1].splitlines()[0]
    for name in ("camp-ab", "camp-sweep"):                      # a campaign's collect and compare
        expected = answers(collect(results / name)).pop(0).text(120).splitlines()[0]
        assert first(f"collect {name}") == expected
    assert first("compare camp-ab") == first("collect camp-ab")
    assert first("collect camp-ab").startswith("tp32-dflash vs tp32 at C=8: worse (within-launch only): "
                                               "Output TPS (steady state) -15.44%, 95% interval [-26.14%,")
    sides = campaign_cli.pair(["dev-tp32", "camp-sweep"], lambda r: results / r)
    (ans,) = campaign_cli.pair_answers(sides)
    assert first("compare dev-tp32 camp-sweep") == ans.text(120).splitlines()[0]
    assert ans.subject.startswith("camp-sweep-") and ans.subject.endswith(" vs dev-tp32 at C=8")   # run ids
    assert first("compare dev-tp32 dev-tp32-dflash").startswith("dev-tp32-dflash")
    assert " vs dev-tp32" in first("compare dev-tp32 dev-tp32-dflash")


def test_the_answers_verdict_is_coloured_by_its_kind_in_a_terminal(results, monkeypatch):
    """In a terminal the verdict word takes its kind's colour (ab_stats.verdicts: red for any form
    of 'worse'); piped, click strips the colour and the line is the plain answer."""
    import click

    from slurm_ab.cli.main import _paint
    from slurm_ab.collect import collect
    from slurm_ab.tables.campaign import answers

    shutil.copytree(ROOT / "tests" / "fixtures" / "report-campaign" / "camp-ab", results / "camp-ab")
    (ans,) = answers(collect(results / "camp-ab"))
    assert ans.verdict == "worse (within-launch only)" and ans.kind == "worse"
    painted = ans.text(120, _paint)
    assert click.style("worse (within-launch only)", fg="red", bold=True) in painted
    assert click.unstyle(painted) == ans.text(120)
