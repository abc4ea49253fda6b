"""The correctness gate (issue 33 item 4): canary answers against the reference mode's, from the
job's files (as the emulator answers: outputs.expected_output), the verdicts and their reasons."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_ab.collect.correctness import apply, campaign_correctness, check_launch, read_answers
from slurm_ab.model.experiment import Correctness
from slurm_ab.model.rundir import Layout
from slurm_ab_testbed.emulator.outputs import expected_output

CFG = Correctness(enabled=True, prompts=4, input_len=64, output_len=32, min_common_prefix=16, min_exact_match=0.5)
VOCAB = list(range(5, 4000))


def _answer(lay: Layout, target: str, k: int, ids, text="x", http="200"):
    lay.correctness_response(target, k).parent.mkdir(parents=True, exist_ok=True)
    lay.correctness_request(k).write_text(json.dumps({"input_ids": list(CFG.prompt_ids(k))}))
    lay.correctness_response(target, k).write_text(json.dumps(
        {"text": text, "output_ids": list(ids), "meta_info": {"finish_reason": {"type": "length"}}}))
    lay.correctness_http(target, k).write_text(http)


def _launch(tmp_path: Path, name: str, targets=("r0", "r1"), diverge_at=None, empty=False, fail=None) -> Layout:
    lay = Layout(tmp_path / name)
    for t in targets:
        for k in range(CFG.prompts):
            ids = expected_output(CFG.prompt_ids(k), CFG.output_len, VOCAB, diverge_at)
            if empty and t == "r1":
                _answer(lay, t, k, [2], text="")
            elif fail == (t, k):
                lay.correctness_http(t, k).write_text("503")
            else:
                _answer(lay, t, k, ids)
    return lay


def test_the_job_and_the_model_build_the_same_prompts():
    c = Correctness(token_base=1000, token_span=1000, input_len=3)
    assert c.prompt_ids(0) == (1000, 1729, 1458) and c.prompt_ids(1)[0] == 1000 + 7919 % 1000


def test_identical_layouts_pass_and_a_diverging_draft_model_is_invalid_naming_the_prompts(tmp_path):
    a = _launch(tmp_path, "launch1-tp32")
    b = _launch(tmp_path, "launch2-tp32-dflash", diverge_at=4)
    out = campaign_correctness([(1, "tp32", a, {}), (2, "tp32-dflash", b, {})], "tp32", CFG)
    assert out[1].verdict == "ok" and out[1].exact_match == 1.0 and out[1].min_common_prefix == 32
    bad = out[2]
    diverged = sorted({c.prompt for c in bad.checks if c.problem == "diverged"})
    # the emulator's divergence fault hits the prompts whose seed is odd (about half), from token 4
    from slurm_ab_testbed.emulator.outputs import diverges
    assert diverged == [k for k in range(4) if diverges(CFG.prompt_ids(k))] and diverged
    assert bad.verdict == "invalid" and bad.min_common_prefix == 4
    assert bad.reasons[0].startswith(f"correctness: replica 0: diverged for canary prompt(s) {', '.join(map(str, diverged))} "
                                     "against tp32 launch 1 replica 0 at token 4")
    # whatever its speed: an ok pass becomes invalid, a failed one keeps its verdict and gets the reasons
    assert apply(bad, "ok", ("flag",)) == ("invalid", bad.reasons + ("flag",))
    assert apply(bad, "failed", ("x",))[0] == "failed" and apply(out[1], "ok", ()) == ("ok", ())


def test_empty_and_missing_answers_are_invalid(tmp_path):
    ref = read_answers(_launch(tmp_path, "ref"), 4, ["r0"])["r0"]
    empty = check_launch(read_answers(_launch(tmp_path, "e", empty=True), 4, ["r0", "r1"]), ref, "tp32 launch 1 replica 0", CFG,
                         {0: ("decode", 0), 1: ("decode", 1)})
    assert empty.verdict == "invalid"
    assert "correctness: decode 1: an empty answer for canary prompt(s) 0, 1, 2, 3" in empty.reasons
    # half the answers differ: exactly at the threshold (0.5) is enough
    assert empty.exact_match == 0.5 and not any("min_exact_match" in r for r in empty.reasons)
    failed = check_launch(read_answers(_launch(tmp_path, "f", fail=("r0", 2)), 4, ["r0", "r1"]), ref, "R", CFG)
    assert failed.reasons == ("correctness: replica 0: no answer for canary prompt(s) 2",)


def test_late_divergence_within_the_threshold_is_tolerated_but_counted(tmp_path):
    ref = read_answers(_launch(tmp_path, "ref"), 4, ["r0"])["r0"]
    late = check_launch(read_answers(_launch(tmp_path, "l", targets=("r0",), diverge_at=20), 4, ["r0"]), ref, "R", CFG)
    n = sum(not c.exact for c in late.checks)
    assert late.min_common_prefix == 20 and all(c.problem == "" for c in late.checks)
    assert late.exact_match == (4 - n) / 4
    strict = check_launch(read_answers(_launch(tmp_path, "s", targets=("r0",), diverge_at=20), 4, ["r0"]), ref, "R",
                          Correctness(prompts=4, output_len=32, min_common_prefix=16, min_exact_match=1.0))
    assert strict.verdict == "invalid" and "below correctness.min_exact_match = 1" in strict.reasons[0]


def test_no_reference_compares_within_the_launch(tmp_path):
    lay = _launch(tmp_path, "launch2-b")
    out = campaign_correctness([(1, "a", Layout(tmp_path / "launch1-a"), {}), (2, "b", lay, {})], "a", CFG)
    assert 1 not in out or out[1].verdict == "not run"
    assert out[2].verdict == "ok" and out[2].reference.startswith("no launch of a answered")


@pytest.mark.parametrize("key, value, words", [("prompts", -1, "must be >= 0"), ("min_exact_match", 1.5, "not a share"),
                                              ("min_common_prefix", 64, "more than the canary's")])
def test_bad_settings_are_named(key, value, words):
    from slurm_ab.model.errors import ConfigErrors
    from slurm_ab.model.sources import Sources, load_experiment
    with pytest.raises(ConfigErrors) as e:
        load_experiment(Sources("example", (), ("paths.results=/r", f"correctness.{key}={value}")), "tp32")
    assert any(err.key == f"correctness.{key}" and words in str(err) for err in e.value.errors)


def test_the_reference_must_be_a_mode_of_the_job():
    from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
    from slurm_ab.model.errors import ConfigErrors
    from slurm_ab.model.sources import Sources
    with pytest.raises(ConfigErrors) as e:
        plan_job(Sources("example", (), ("paths.results=/r", "correctness.reference=pp8")), ["tp32", "tp32-dflash"], "R",
                 CampaignOptions())
    assert "correctness.reference = 'pp8': not a mode of this job" in str(e.value)
