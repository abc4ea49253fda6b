"""Campaign plans: validation of every mode and of their shapes, the rendered campaign script."""
from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from helpers.scripts import (GOLDEN_RUN_ID, GOLDEN_SETS, check_golden, generated, render,
                             shellcheck, static)
from slurm_ab.job.campaign_plan import CampaignOptions, campaign_summary, plan_job, resolve_options
from slurm_ab.model.errors import ConfigErrors
from slurm_ab.job.render import render_script
from slurm_ab.model.rundir import RELATIVE
from slurm_ab.model.sources import Sources, load_experiment

AB = ["tp32", "tp32-dflash"]


def _plan(modes=AB, site="example", run_id=GOLDEN_RUN_ID, sets=(), **opts):
    return plan_job(Sources(site, (), GOLDEN_SETS + tuple(sets)), list(modes), run_id,
                         CampaignOptions(**opts))


def test_a_single_mode_is_a_campaign_of_one_launch_and_one_pass():
    plan = _plan(["tp32"])
    (launch,) = plan.campaign.launches
    assert launch.dir == "launch1-tp32" and plan.mode_label == "tp32"
    assert [p.spec for p in launch.passes] == [
        f"8:1:40:c8-r1:{RELATIVE.bench('c8-r1')}:{RELATIVE.client_log('c8-r1')}"]
    assert render_script(plan) == render("tp32")


def test_two_modes_default_to_the_calibrated_counterbalanced_design():
    c = _plan().campaign.campaign
    assert (c.modes, c.repeats, c.concurrencies, c.order, c.burn_in, c.launches_per_mode) == \
        (tuple(AB), 2, (8,), "counterbalanced", False, 4)
    assert [x.mode for x in c.launches] == AB + AB[::-1] + AB + AB[::-1] and len(c.passes) == 16


def test_campaign_golden_and_shell_checks(tmp_path):
    text = render_script(_plan(repeats=3, order="blocked"))
    check_golden("campaign-tp32-vs-tp32-dflash.sbatch", generated(text))
    assert static(text) == static(render("tp32"))        # one flow for runs and campaigns
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    r = shellcheck(script)
    assert r.returncode == 0, r.stdout
    # one allocation: the header is the single run's but for the --time its estimate asks (time
    # limit "auto"); every mode's server command is there
    single = render("tp32")

    def header(t):
        return [ln for ln in t.splitlines() if ln.startswith("#SBATCH") and not ln.startswith("#SBATCH --time=")]
    assert header(text) == header(single)
    assert "#SBATCH --time=01:56:00" in text and "#SBATCH --time=00:48:00" in single
    assert "SERVER_CMD_0_server=(" in text and "SERVER_CMD_1_server=(" in text
    files = [f"{RELATIVE.bench(k)}:{RELATIVE.client_log(k)}" for k in ("c8-r1", "c8-r2")]
    assert f"LAUNCH_PASSES=(\n  '8:1:40:c8-r1:{files[0]} 8:2:40:c8-r2:{files[1]} " in text
    assert "LAUNCH_DIRS=(launch1-tp32 launch2-tp32-dflash)" in text
    assert '--output-file "${RUN_DIR}/${PASS_BENCH}"' in text
    assert '--max-concurrency "${PASS_C}"' in text and '--num-prompts "${PASS_PROMPTS}"' in text


def test_interleaved_sweep_with_burn_in(tmp_path):
    plan = _plan(repeats=1, launches=2, concurrencies="1,8", order="interleaved", burn_in=True,
                 sets=("benchmark.prompts_per_concurrency=5",))
    c = plan.campaign.campaign
    assert [x.mode for x in c.launches] == AB * 2
    assert [p.spec for p in c.launches[0].passes] == ["1:0:5", "1:1:5", "8:1:40"]
    assert [p.key for p in plan.campaign.launches[0].passes] == ["c1-burnin", "c1-r1", "c8-r1"]
    assert [p.key for p in plan.campaign.launches[2].passes] == ["c1-burnin", "c1-r2", "c8-r2"]
    text = render_script(plan)
    assert "LAUNCH_SERVER=(0 1 0 1)" in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert shellcheck(script).returncode == 0
    summary = campaign_summary(plan)
    assert "4 server launch(es), 8 timed pass(es) in one allocation" in summary
    assert "across launches" in summary


def test_preflight_checks_the_draft_model_of_any_mode():
    plan = _plan(["tp32", "tp32-dflash"], repeats=2)
    assert any(what == "draft model" for what, _ in plan.preflight.paths)


@pytest.mark.parametrize("opts, key", [
    (dict(repeats=0), "--repeats"), (dict(repeats=101), "--repeats"),
    (dict(order="random"), "--order"), (dict(concurrencies="1,x"), "--concurrency"),
])
def test_bad_options_are_config_errors(opts, key):
    with pytest.raises(ConfigErrors) as e:
        _plan(**opts)
    assert any(err.key == key for err in e.value.errors) and e.value.exit_code == 2


def test_every_mode_is_validated_and_duplicates_refused():
    with pytest.raises(ConfigErrors) as e:
        _plan(["tp32", "nope"])
    assert "unknown mode" in str(e.value)
    with pytest.raises(ConfigErrors, match="given twice"):
        _plan(["tp32", "tp32"])
    with pytest.raises(ConfigErrors, match=r"modes\.tp32-dflash\.args\.mem-fraction-static"):
        _plan(sets=("modes.tp32-dflash.args.mem-fraction-static=1.5",))


def test_modes_of_different_shape_cannot_share_an_allocation():
    src = Sources("example", (), GOLDEN_SETS)
    exps = [load_experiment(src, m) for m in AB]
    mode = exps[1].mode
    exps[1] = dataclasses.replace(exps[1], mode=dataclasses.replace(
        mode, roles=(dataclasses.replace(mode.roles[0], nodes=2, tp=16),)))
    with pytest.raises(ConfigErrors) as e:
        resolve_options(exps, CampaignOptions(repeats=2))
    msg = str(e.value)
    assert "different shape" in msg and "tp32: 2 components of 4 + 4 nodes" in msg
    assert "tp32-dflash: 2 components of 2 + 2 nodes" in msg


def test_default_campaign_run_id_names_the_modes(monkeypatch):
    monkeypatch.delenv("RUN_ID", raising=False)
    plan = plan_job(Sources("example", (), GOLDEN_SETS), AB, None, CampaignOptions(repeats=2))
    assert re.fullmatch(r"dp2-tp32-vs-tp32-dflash-\d{8}-\d{6}", plan.run_id)


def test_sequential_campaign_golden_and_shell_checks(tmp_path):
    """A sequential campaign's generated part: SEQ_LOOK_AFTER, the client's Python, the spec with
    its boundaries and the stop rule (golden); the static flow is every job's."""
    text = render_script(_plan(repeats=1, launches=6, sequential=True))
    check_golden("campaign-sequential-tp32-vs-tp32-dflash.sbatch", generated(text))
    assert static(text) == static(render("tp32"))
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    r = shellcheck(script)
    assert r.returncode == 0, r.stdout
    assert "SEQ_LOOK_AFTER=(4 8 12)" in text and "write_stop_rule() {" in text
    assert "write_stop_rule() {" not in render("tp32")        # only a sequential campaign looks
    # every step on ROUTER_HOST that runs the image's programs (router, client, the capacity search's
    # decision, the stop rule) runs in the mode's image: pyxis' CT, or an exec runtime's IMAGE_EXEC
    # before env, both from in_image (the host sampler reads the node's /proc: no exec image)
    steps = re.findall(r'side_srun --het-group=0 --nodelist="\$ROUTER_HOST"(.*?)(?:&\n|\)\n)', text, re.S)
    assert len(steps) == 5
    for step in steps:
        assert '"${CT[@]}"' in step, step
        assert ('"${IN_IMAGE[@]}" ' in step) != ("TELEMETRY_HOST" in step), step
