"""A job sized to its time limit (issue 20): the estimate, --time auto, a limit too short refused
with exit 2 naming both figures, and figures measured by earlier runs of the same model."""
from __future__ import annotations

import json
import math
import re

import pytest

from slurm_ab.model.duration import History, estimate, fit_time_limit, format_time, parse_time, read_history
from slurm_ab.model.errors import ConfigErrors
from slurm_ab.model.sources import Sources
from helpers.scripts import plan_for


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("10:30", 630), ("02:00:00", 7200),
                                          ("1-00", 86400), ("1-02:30", 95400), ("2-01:00:05", 176405),
                                          ("UNLIMITED", None), ("auto", None)])
def test_slurm_time_formats(text, seconds):
    assert parse_time(text) == seconds


def test_format_rounds_up_to_minutes_and_days():
    assert format_time(61) == "00:02:00" and format_time(3600) == "01:00:00"
    assert format_time(90000) == "1-01:00:00"


def _plan(*sets, site="example"):
    return plan_for(Sources(site, (), ("paths.results=/nonexistent-results",) + sets), "tp32", "R")


def test_estimate_of_one_run_from_the_site_figures():
    p = _plan()
    e = estimate(p)
    # 120 overhead + (1800 load + 60 warm-ups + 20 grace) + ceil(40/8)=5 x 60 + 30 = 2330 s, +15 %
    assert e.launches == 1 and e.passes == 1
    assert e.seconds == pytest.approx(2330 * 1.15)
    assert e.limit_s == 2680 + 120 + 60          # ceil(2679.5) + the early stop + Slurm's early warning
    assert e.pass_seconds("tp32", 40, 8) == 330
    assert "model load 1800 s (site default [estimate] model_load_s)" in e.text
    assert "tp32 C=8 x 40 prompts 60.0 s (site default [estimate] request_s)" in e.text
    assert "needs --time 00:48:00" in e.text


def test_the_seed_campaign_is_sized_by_default_and_a_pinned_two_hours_refused(cli):
    # issue 20's example: an A/B of 5 repeats, relaunched per repeat; issue 35: no --time and no
    # site pin -> "auto", the limit its estimate needs
    ab = ("dry-run", "tp32", "tp32-dflash", "--repeats", "5", "--order", "interleaved", "--run-id", "R")
    code, out, err = cli(*ab)
    assert code == 0 and "--time=auto" not in out
    needed = re.search(r"#SBATCH --time=(\S+)", out).group(1)
    assert out.count(f"#SBATCH --time={needed}") == 2 and parse_time(needed) > 7200
    launches = int(re.search(r"duration estimate: (\d+) server launch\(es\)", err).group(1))
    assert launches >= 4 and f"time {needed}" in err and "(auto: sized by the estimate; partition " in err
    assert cli(*ab, "--time", "auto")[1] == out
    for pin in (("--time", "02:00:00"), ("--set", 'cluster.time_limit="02:00:00"')):    # user or site
        code, out2, err = cli(*ab, *pin)
        assert code == 2 and out2 == ""
        # exit 2, naming both figures and the way out
        assert f"cluster.time_limit (--time) = '02:00:00': too short for this job: it needs {needed}" in err
        assert f"{launches} server launch(es)" in err and f"--time auto, or at least {needed}" in err
    code, out, err = cli(*ab, "--time", "1-00:00:00")
    assert code == 0 and out.count("#SBATCH --time=1-00:00:00") == 2
    assert "(pinned (cluster.time_limit or --time); partition " in err


def test_the_readme_campaign_line_runs_on_the_example_site(cli):
    """Issue 35: `slurm-ab dry-run tp32 tp32-dflash --repeats 3` as written, on the built-in site."""
    code, out, err = cli("dry-run", "tp32", "tp32-dflash", "--repeats", "3")
    assert code == 0, err
    assert out.count("#SBATCH --time=07:26:00") == 2 and "needs --time 07:26:00" in err


def _fake_scontrol(tmp_path, monkeypatch, answer: str | None):
    """scontrol on PATH that prints `answer` for `show partition` (None: no scontrol at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if answer is not None:
        script = bin_dir / "scontrol"
        script.write_text(f"#!/bin/sh\necho 'PartitionName=$5 State=UP {answer} MinNodes=0'\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("SBATCH_PARTITION", raising=False)


def test_auto_is_bounded_by_the_partitions_max_time(cli, tmp_path, monkeypatch):
    """The partition's MaxTime, as scontrol answers at dry-run time, bounds "auto": a job that needs
    more is refused (exit 2) naming both; estimate.enforce = false asks the MaxTime instead."""
    ab = ("dry-run", "tp32", "tp32-dflash", "--repeats", "3")
    _fake_scontrol(tmp_path, monkeypatch, "MaxTime=04:00:00")
    code, out, err = cli(*ab)
    assert code == 2 and out == ""
    assert ("cluster.time_limit (--time) = 'auto': the job needs 07:26:00 (8 server launch(es)" in err
            and "more than partition gpu allows (MaxTime 04:00:00)" in err and "cluster.partition" in err)
    code, out, err = cli(*ab, "--set", "estimate.enforce=false")
    assert code == 0 and out.count("#SBATCH --time=04:00:00") == 2
    assert "time limit 04:00:00 -- SHORTER than the estimate" in err
    code, out, err = cli("dry-run", "tp32")                       # 00:48:00 fits
    assert code == 0 and "#SBATCH --time=00:48:00" in out and "partition gpu allows 04:00:00" in err


def test_a_grace_longer_than_killwait_is_said_at_dry_run(cli, tmp_path, monkeypatch):
    """The servers' steps run with srun --kill-on-bad-exit=1: at teardown the first rank to exit
    on SIGTERM makes Slurm SIGKILL the rest KillWait later, so a grace above KillWait is not what
    SGLang gets (seen on the local cluster: KillWait 5 s, grace 10 s, the hung head killed after
    5.7 s). The example site's grace is 20 s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text('#!/bin/sh\nif [ "$2" = config ]; then echo "KillWait                = $KW sec"; '
                      'else echo "PartitionName=$5 State=UP MaxTime=UNLIMITED MinNodes=0"; fi\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("SBATCH_PARTITION", raising=False)
    monkeypatch.setenv("KW", "5")
    code, out, err = cli("dry-run", "tp32")
    assert code == 0, err
    assert ("WARNING: cluster.teardown_grace_s = 20 s is longer than this cluster's KillWait (5 s)" in err
            and "SGLang gets about 5 s to drain, not 20" in err), err
    monkeypatch.setenv("KW", "30")                                  # Slurm's default
    code, out, err = cli("dry-run", "tp32")
    assert code == 0 and "WARNING" not in err and "KillWait" not in err


def test_auto_where_slurm_does_not_answer_says_so(cli, tmp_path, monkeypatch):
    _fake_scontrol(tmp_path, monkeypatch, None)
    code, out, err = cli("dry-run", "tp32", "tp32-dflash", "--repeats", "3")
    assert code == 0 and out.count("#SBATCH --time=07:26:00") == 2
    assert ("partition gpu's MaxTime and MaxNodes unknown (Slurm did not answer here)" in err
            and "PartitionTimeLimit" in err and "PartitionNodeLimit" in err and "not checked" in err)


def test_a_component_above_the_partitions_max_nodes_is_refused(cli, tmp_path, monkeypatch):
    """MaxNodes is per job, and each het component is a job: 4 nodes per replica against
    MaxNodes=2 never start (PartitionNodeLimit); nor 8 exclusive nodes on a partition of 6."""
    _fake_scontrol(tmp_path, monkeypatch, "MaxTime=UNLIMITED MaxNodes=2 TotalNodes=64")
    code, out, err = cli("dry-run", "tp32")
    assert code == 2 and out == ""
    assert ("cluster.partition = 'gpu': a component of this job needs 4 nodes, more than the partition allows "
            "a job (MaxNodes=2; each het component counts as a job)") in err
    (tmp_path / "bin" / "scontrol").unlink()
    (tmp_path / "bin").rmdir()
    _fake_scontrol(tmp_path, monkeypatch, "MaxTime=UNLIMITED MaxNodes=UNLIMITED TotalNodes=6")
    code, out, err = cli("dry-run", "tp32")
    assert code == 2 and "the job needs 8 nodes at once, the partition has 6 (TotalNodes)" in err
    code, out, err = cli("dry-run", "tp32", "--set", "cluster.exclusive=false")    # may share nodes
    assert code == 0 and "partition gpu allows UNLIMITED" in err


def test_an_explicit_limit_that_fits_is_kept(cli):
    code, out, err = cli("dry-run", "tp32", "--time", "01:00:00")
    assert code == 0 and "#SBATCH --time=01:00:00" in out
    code, out, err = cli("dry-run", "tp32", "--time", "00:40:00")
    assert code == 2 and "needs 00:48:00" in err and "'00:40:00'" in err


@pytest.mark.parametrize("value", ["soon", "Auto", "", "2 hours"])
def test_an_unparseable_time_is_a_config_error(cli, value):
    code, _, err = cli("dry-run", "tp32", "--time", value)
    assert code == 2 and f"cluster.time_limit = {value!r}" in err and "auto" in err


def _write_run(root, run_id, mode, load_s, pass_s, model="/shared/models/Kimi-K3", prompts=40, conc=8,
               campaign=False, pass_fields="", not_ready=False, ready_timeout=1800):
    d = root / run_id
    d.mkdir(parents=True)
    cfg = {"paths": {"model": model}, "nodes_per_replica": 4, "cluster": {"ready_timeout_s": ready_timeout},
           "benchmark": {"input_len": 16384, "output_len": 512, "num_prompts": prompts, "concurrency": conc}}
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "mode": mode, "config": cfg}))
    t0 = 1_800_000_000.0
    lines = [f"{t0:.3f} 2027-01-15 08:00:00.000 server_launch replica=0",
             f"{t0:.3f} 2027-01-15 08:00:00.000 server_launch replica=1",
             f"{t0 + load_s - 5:.3f} 2027-01-15 08:00:00.000 ready replica=0 seconds=1"]
    if not_ready:      # replica 1 never answered /health: the job gave up after its ready timeout
        lines.append(f"{t0 + load_s:.3f} 2027-01-15 08:00:00.000 fail kind=not_ready replicas=1")
    else:
        lines += [f"{t0 + load_s:.3f} 2027-01-15 08:00:00.000 ready replica=1 seconds=1",
                  f"{t0 + load_s + 10:.3f} 2027-01-15 08:00:00.000 bench_start pass=p1 {pass_fields}".rstrip(),
                  f"{t0 + load_s + 10 + pass_s:.3f} 2027-01-15 08:00:00.000 bench_end pass=p1 rc=0"]
    (d / "events.log").write_text("\n".join(lines) + "\n")
    return d


def test_measured_figures_of_earlier_runs_replace_the_defaults(tmp_path):
    results = tmp_path / "results"
    _write_run(results, "a", "tp32", load_s=600, pass_s=230)        # (230 - 30) / 5 = 40 s a request
    _write_run(results, "b", "tp32", load_s=700, pass_s=180)        # 30 s a request
    _write_run(results, "other-model", "tp32", load_s=5000, pass_s=5000, model="/other")
    _write_run(results, "other-mode", "pp8", load_s=100, pass_s=1000)
    p = _plan(f"paths.results={results}")
    h = read_history(p.exp)
    assert sorted(s for s, _ in h.loads) == [100, 600, 700]        # every launch of the model on 4 nodes
    e = estimate(p, h)
    assert e.load.seconds == 700 and "measured" in e.load.source and "run b" in e.load.source
    f = e.model.figure("tp32", 40, 8)
    assert f.seconds == pytest.approx(40) and "run a" in f.source
    assert e.seconds == pytest.approx((120 + 700 + 60 + 20 + 5 * 40 + 30) * 1.15)


def test_history_is_matched_on_concurrency_and_prompts(tmp_path):
    """Seconds per request depend on the concurrency (a round of C requests) and are taken only
    from passes of the same mode at the same concurrency and prompts (issue 31)."""
    results = tmp_path / "results"
    _write_run(results, "c1", "tp32", load_s=600, pass_s=30 + 40 * 9, pass_fields="concurrency=1 prompts=40")
    _write_run(results, "c8-80", "tp32", load_s=600, pass_s=30 + 10 * 50, pass_fields="concurrency=8 prompts=80")
    _write_run(results, "c8-40", "tp32", load_s=600, pass_s=30 + 5 * 20, pass_fields="concurrency=8 prompts=40")
    h = read_history(_plan(f"paths.results={results}").exp)
    assert sorted((m, c, p, round(s)) for m, c, p, s, _ in h.requests) == [
        ("tp32", 1, 40, 9), ("tp32", 8, 40, 20), ("tp32", 8, 80, 50)]
    e = estimate(_plan(f"paths.results={results}"), h)          # C=8, 40 prompts: run c8-40's 20 s only
    assert e.model.figure("tp32", 40, 8).seconds == pytest.approx(20) and "run c8-40" in e.text
    assert e.model.figure("tp32", 40, 1).seconds == pytest.approx(9)
    assert e.model.figure("tp32", 40, 4).source == "site default [estimate] request_s"   # never measured


def test_a_launch_that_never_became_ready_counts_at_its_ready_timeout(tmp_path):
    """Leaving out the loads that timed out keeps the estimate at the ones that were fast enough:
    a launch that never became ready took at least its ready timeout (issue 31)."""
    results = tmp_path / "results"
    _write_run(results, "fast", "tp32", load_s=600, pass_s=230)
    _write_run(results, "stuck", "tp32", load_s=1500, pass_s=0, not_ready=True, ready_timeout=2400)
    h = read_history(_plan(f"paths.results={results}").exp)
    assert sorted(s for s, _ in h.loads) == [600, 2400] and h.not_ready == ("stuck",)
    e = estimate(_plan(f"paths.results={results}"), h)
    assert e.load.seconds == 2400 and "run stuck" in e.load.source
    assert "1 never became ready, counted at their ready timeout" in e.load.source


def test_the_conservative_first_estimate_flows_to_every_consumer(cli, tmp_path):
    """No history: the site's model load (1800 s, the top of 10-30 min for a Kimi-size model) sizes
    --time auto, the refusal of a pinned limit and the planner alike (one time model)."""
    from slurm_ab.model.sources import load_experiment
    from slurm_ab.cli.planner import costs
    p = fit_time_limit(_plan(), History())
    assert p.estimate.load.seconds == 1800 and "--time=00:48:00" in p.sbatch_component
    with pytest.raises(ConfigErrors):
        fit_time_limit(_plan('cluster.time_limit="00:40:00"'), History())
    exp = load_experiment(Sources("example", (), ("paths.results=/nonexistent-results",)), "tp32")
    c, _ = costs(exp, ("tp32",), None, None, 1000)
    assert c.time.load.seconds == 1800 and c.time.figure("tp32", 40, 8).seconds == 60


def test_from_results_off_keeps_the_site_figures(tmp_path):
    results = tmp_path / "results"
    _write_run(results, "a", "tp32", load_s=50, pass_s=40)
    p = fit_time_limit(_plan(f"paths.results={results}", "estimate.from_results=false"))
    assert p.estimate.load.seconds == 1800


def test_enforce_false_lets_a_short_limit_through_and_dry_run_says_so(cli):
    code, out, err = cli("dry-run", "tp32", "--time", "00:20:00", "--set", "estimate.enforce=false")
    assert code == 0 and "#SBATCH --time=00:20:00" in out
    assert "time limit 00:20:00 -- SHORTER than the estimate (estimate.enforce = false)" in err


def test_fit_replaces_auto_and_records_the_estimate():
    p = fit_time_limit(_plan('cluster.time_limit="auto"'), History())
    assert "--time=00:48:00" in p.sbatch_component and p.estimate.limit_s == 2860
    with pytest.raises(ConfigErrors) as e:
        fit_time_limit(_plan('cluster.time_limit="00:10:00"'), History())
    assert "needs 00:48:00" in str(e.value.errors[0])


def test_blocks_are_priced_by_the_one_time_model_without_its_margin():
    """A campaign's blocks (2 launches of every mode, then the rest) at the time model's expected
    launch time, without the margin the limit keeps as slack: a preflight slower than estimated
    must not keep the first block from starting (duration.block_seconds, TIME_BLOCKS)."""
    from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
    plan = plan_job(Sources("example", (), ("paths.results=/nonexistent-results",)), ["tp32", "tp32-dflash"],
                         "R", CampaignOptions(launches=3, repeats=1, order="counterbalanced"))
    launch = 1800 + 60 + 20 + 5 * 60 + 30                            # load, warm-ups, grace, one pass
    assert plan.time_blocks == ((1, 4 * launch), (5, 2 * launch))    # A B B A, then A B
    assert "TIME_BLOCKS=(1:8840 5:4420)" in __import__("slurm_ab.job.render", fromlist=["x"]).render_script(plan)
    one = plan_job(Sources("example", (), ("paths.results=/nonexistent-results",)), ["tp32"], "R",
                   CampaignOptions(repeats=3))
    assert one.time_blocks == ()                                     # one launch: no boundary to stop at


def test_open_loop_blocks_are_priced_as_the_job_runs_them():
    """An open-loop pass runs its arrival span (prompts / rate) and a drain, not ceil(prompts / C)
    rounds (its C is its prompts: one round): the job's block check (TIME_BLOCKS) prices it from the
    same schedule as --time auto (campaign_schedule), so the two never disagree."""
    from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
    from slurm_ab.model.duration import OPEN_LOOP_DRAIN, campaign_schedule
    plan = plan_job(Sources("example", (), ("paths.results=/nonexistent-results",)), ["tp32", "tp32-dflash"],
                    "R", CampaignOptions(launches=2, repeats=1, rates="0.5", burn_in=False, order="counterbalanced"))
    model = plan.duration.model
    (p,) = plan.campaign.campaign.launches[0].passes
    assert p.rate == 0.5 and p.concurrency == p.prompts
    one = model.launch_s + p.prompts / 0.5 + OPEN_LOOP_DRAIN * model.default_request.seconds + model.pass_overhead_s
    assert plan.time_blocks == ((1, math.ceil(4 * one)),)            # A B B A, priced open-loop
    # the job's estimate (--time auto) and its blocks add up from the one schedule
    sched = campaign_schedule(plan.campaign.campaign)
    assert sum(s for _, s in plan.time_blocks) == math.ceil(sum(model.launch_seconds(m, ps) for m, ps in sched))


def test_an_open_loop_pass_is_measured_as_the_time_model_prices_it(tmp_path):
    """An earlier open-loop pass's seconds per request are what the model's open-loop price
    (prompts / rate + OPEN_LOOP_DRAIN x figure + the client's start-up) needs to give its measured
    duration back, not its whole duration over one closed-loop round (its C is its prompts): that
    figure (230 s here) would price the next pass at 4 x 230 s of drain."""
    from slurm_ab.model.duration import OPEN_LOOP_DRAIN
    results = tmp_path / "results"
    # 40 prompts at 0.25 req/s: 160 s of arrivals, 30 s start-up, 40 s drain: 10 s a request
    _write_run(results, "q", "tp32", load_s=600, pass_s=30 + 160 + 40, pass_fields="concurrency=40 prompts=40 rate=0.25")
    _write_run(results, "c", "tp32", load_s=600, pass_s=30 + 5 * 20, pass_fields="concurrency=8 prompts=40 rate=inf")
    h = read_history(_plan(f"paths.results={results}").exp)
    assert sorted((m, c, p, round(s, 3)) for m, c, p, s, _ in h.requests) == [
        ("tp32", 8, 40, 20), ("tp32", 40, 40, 40 / OPEN_LOOP_DRAIN)]
    e = estimate(_plan(f"paths.results={results}"), h)
    assert e.model.pass_seconds("tp32", 40, 40, 0.25) == pytest.approx(230)      # its measured duration back
    assert e.model.pass_seconds("tp32", 40, 8) == pytest.approx(130)
