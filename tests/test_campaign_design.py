"""The shape of a comparison: counterbalanced launches, --launches/--repeats, the primary metric."""
from __future__ import annotations

import pytest

from slurm_ab.model.campaign import Campaign, launch_order, schedule


def test_counterbalanced_order_is_a_b_b_a_and_cancels_a_linear_drift():
    assert launch_order(("A", "B"), 4, "counterbalanced") == list("ABBAABBA")
    assert launch_order(("A", "B", "C"), 2, "counterbalanced") == list("ABCCBA")
    assert launch_order(("A", "B"), 3, "interleaved") == list("ABABAB")
    assert launch_order(("A", "B"), 2, "blocked") == list("AABB")
    seq = launch_order(("A", "B"), 4, "counterbalanced")
    pos = {m: [i for i, x in enumerate(seq) if x == m] for m in "AB"}
    assert sum(pos["A"]) == sum(pos["B"])          # equal mean position: a linear drift cancels


def test_launches_per_mode_and_passes_per_launch():
    c = schedule(("a", "b"), 2, (8,), "counterbalanced", False, 40, launches=2)
    assert [(x.mode, [p.key for p in x.passes]) for x in c.launches] == [
        ("a", ["c8-r1", "c8-r2"]), ("b", ["c8-r1", "c8-r2"]), ("b", ["c8-r3", "c8-r4"]), ("a", ["c8-r3", "c8-r4"])]
    assert c.variance_levels == ("launch", "pass") and "across launches" in c.variance
    assert c.launches_per_mode == 2
    assert Campaign.from_dict(c.to_dict()) == c
    blocked = schedule(("a", "b"), 4, (8,), "blocked", False, 40)
    assert blocked.variance_levels == ("pass",) and "within one launch only" in blocked.variance
    assert len(schedule(("a",), 1, (8,), "counterbalanced", False, 40, launches=2).launches) == 2
    assert len(schedule(("a",), 1, (8,), "counterbalanced", False, 40).passes) == 1


def test_an_old_manifest_reads_its_launches_per_mode():
    old = {"modes": ["a", "b"], "repeats": 1, "concurrencies": [8], "order": "interleaved", "burn_in": False,
           "launches": [{"index": i, "mode": m, "passes": []} for i, m in enumerate("abab", 1)]}
    c = Campaign.from_dict(old)
    assert c.launches_per_mode == 2 and c.primary_metric == "output_tps"


def _resolve(**kw):
    from slurm_ab.job.campaign_plan import CampaignOptions, resolve_options
    from slurm_ab.model.sources import Sources, load_experiment
    sets = tuple(kw.pop("sets", ()))
    exps = [load_experiment(Sources(None, (), sets), m) for m in ("tp32", "tp32-dflash")]
    return resolve_options(exps, CampaignOptions(**kw))


def test_defaults_of_a_comparison_and_their_validation():
    from slurm_ab.model.errors import ConfigErrors
    c = _resolve()
    assert (c.order, c.launches_per_mode, c.repeats) == ("counterbalanced", 4, 2) and len(c.launches) == 8
    assert _resolve(launches=3, repeats=1).launches_per_mode == 3
    with pytest.raises(ConfigErrors, match="blocked order launches each mode once"):
        _resolve(order="blocked", launches=2)
    assert _resolve(order="blocked").launches_per_mode == 1
    with pytest.raises(ConfigErrors, match="benchmark.primary_metric"):
        _resolve(sets=["benchmark.primary_metric=input_tps"])
    assert _resolve(sets=["benchmark.primary_metric=tpot_mean_ms"]).primary_metric == "tpot_mean_ms"
    with pytest.raises(ConfigErrors, match="--launches"):
        _resolve(launches=0)
