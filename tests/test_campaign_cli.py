"""The CLI's campaign commands without a cluster: dry-run/render of campaigns, bad input (exit 2,
nothing written), report/compare of a campaign directory built from the seed's data."""
from __future__ import annotations

import json

from test_collect_campaign import _campaign
from slurm_ab.model.rundir import RELATIVE, Layout, read_manifest


def test_dry_run_of_a_campaign(cli):
    # 12 passes (C=1 ones of 40 requests in turn) do not fit the example site's 02:00:00: sized by its estimate
    code, out, err = cli("dry-run", "tp32", "tp32-dflash", "--order", "blocked", "--launches", "1",
                         "--repeats", "3", "--concurrency", "1,8", "--time", "auto")
    assert code == 0, err
    assert "LAUNCH_DIRS=(launch1-tp32 launch2-tp32-dflash)" in out
    specs = [f"{c}:{r}:40:c{c}-r{r}:{RELATIVE.bench(f'c{c}-r{r}')}:{RELATIVE.client_log(f'c{c}-r{r}')}"
             for c in (1, 8) for r in (1, 2, 3)]
    assert "  '" + " ".join(specs) + "'\n" in out
    assert "campaign: modes tp32, tp32-dflash; 3 repeat(s) x concurrency 1, 8; order blocked" in err
    assert "2 server launch(es), 12 timed pass(es) in one allocation" in err
    # the default comparison: counterbalanced launches, A B B A A B B A
    code, out, err = cli("dry-run", "tp32", "tp32-dflash", "--time", "auto")
    assert code == 0, err
    assert "LAUNCH_MODES=(tp32 tp32-dflash tp32-dflash tp32 tp32 tp32-dflash tp32-dflash tp32)" in out


def test_one_mode_without_options_is_a_campaign_of_one_pass(cli):
    code, out, err = cli("dry-run", "tp32", "--run-id", "x")
    assert code == 0 and "LAUNCH_DIRS=(launch1-tp32)\n" in out and "SINGLE" not in out
    lay = RELATIVE
    assert f"LAUNCH_PASSES=(\n  8:1:40:c8-r1:{lay.bench('c8-r1')}:{lay.client_log('c8-r1')}\n)" in out
    assert "1 server launch(es), 1 timed pass(es) in one allocation" in err
    code, out, _ = cli("dry-run", "tp32", "--run-id", "x", "--repeats", "3")
    assert code == 0 and "LAUNCH_DIRS=(launch1-tp32)\n" in out
    assert f"  '8:1:40:c8-r1:{lay.bench('c8-r1')}:{lay.client_log('c8-r1')} 8:2:40:c8-r2" in out


def test_bad_campaigns_exit_2_and_write_nothing(cli, tmp_path):
    for args in (["tp32", "nope"], ["tp32", "tp32"], ["tp32", "pp8", "--repeats", "0"],
                 ["tp32", "pp8", "--concurrency", "8,x"]):
        code, out, err = cli("submit", *args)
        assert code == 2, (args, err)
        assert err.startswith("slurm-ab: error: ")
    code, _, err = cli("submit", "tp32", "pp8", "--order", "random")
    assert code == 2 and "random" in err
    assert not (tmp_path / "results").exists()


def test_render_prepares_every_launch_directory(cli, tmp_path):
    code, _, err = cli("render", "tp32", "tp32-dflash", "--repeats", "2", "--run-id", "c1", "--time", "auto")
    assert code == 0, err
    root = Layout(tmp_path / "results" / "c1")
    m = json.loads(root.manifest.read_text())
    assert m["campaign"]["modes"] == ["tp32", "tp32-dflash"] and m["mode"] == "tp32+tp32-dflash"
    for launch, mode in zip(read_manifest(root.root).campaign.launches, ("tp32", "tp32-dflash")):
        lm = json.loads(root.launch(launch).manifest.read_text())
        i = launch.index
        assert lm["mode"] == mode and lm["config"]["mode"]["name"] == mode
        assert lm["campaign_launch"]["index"] == i and "campaign" not in lm


def test_report_and_compare_of_a_campaign(cli, tmp_path):
    root = _campaign(tmp_path, second_fails=True)
    code, out, err = cli("report", str(root))
    assert code == 0, err
    assert "## Aggregates" in out and "tp32" in out and "1/1" in out and "0/1" in out
    code, out, _ = cli("report", str(root), "--passes")
    assert "## Passes" in out and "failed: replica 1 node rank 2" in out
    code, out, _ = cli("compare", str(root))
    assert code == 0 and "tp32-dflash vs tp32" in out and "variance included: within one launch only" in out
    code, out, _ = cli("compare", str(root), "--format", "json")
    data = json.loads(out)
    assert list(data["comparisons"][0]["metrics"][0]) == [
        "metric", "a_mean", "b_mean", "change_pct", "ci_low_pct", "ci_high_pct", "n_a", "n_b", "verdict",
        "launches_a", "launches_b", "variance_levels", "p_value", "drift_adjusted", "confidence", "margin_pct",
        "df", "estimate", "se", "log_scale", "scale", "qualifier", "label", "role", "p_holm", "family", "same_as"]
    assert data["comparisons"][0]["metrics"][0]["role"] == "primary"
    assert not Layout(root).report_html.exists()                # the tables draw no page
    code, out, _ = cli("collect", str(root))
    # report already wrote the summary files; collect draws the missing page
    wrote = out[out.rindex("\nwrote ") + 1:]                  # wrapped at 120 columns
    assert code == 0 and wrote.startswith("wrote ") and "summary" not in wrote and "report.html" in wrote, wrote
    assert cli("collect", str(root))[1].splitlines()[-1] == "summary files unchanged"
    md = Layout(root).summary("md").read_text()
    assert md.startswith("tp32-dflash vs tp32 at C=8: no comparison: ") and "\n# Campaign camp" in md


def test_compare_of_two_runs_of_one_pass_says_no_interval(cli, tmp_path):
    from helpers.rundir_builder import TP32_DFLASH, RunSpec, build_run

    a, b = build_run(tmp_path), build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    code, out, _ = cli("compare", str(a), str(b))
    assert code == 0 and "-20.69%" in out and "inconclusive (n=1)" in out and "no interval" in out
    code, out, _ = cli("compare", str(a), str(b), "--format", "json")
    data = json.loads(out)
    assert "rows" in data and "warnings" in data
    m = {x["metric"]: x for x in data["metrics"]}
    assert m["output_tps"]["verdict"] == "inconclusive (n=1)" and m["output_tps"]["ci_low_pct"] is None
