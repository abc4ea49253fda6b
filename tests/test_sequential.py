"""Group-sequential campaigns: boundaries against published values and a multivariate-normal
reference, the look (stdlib only) against statsmodels, and the look's decisions."""
from __future__ import annotations

import ast
import math
import random

import numpy as np
import pytest
from scipy import stats

from slurm_ab.ab_stats import looks
from slurm_ab.ab_stats.sequential import boundaries, critical_table, exit_probabilities, nominal_alpha, spending


def test_obrien_fleming_boundaries_are_the_published_ones():
    """rpact getDesignGroupSequential(kMax = 4, alpha = 0.05, sided = 2, typeOfDesign = "asOF")
    and gsDesign sfLDOF: 4.333, 2.963, 2.359, 2.014."""
    assert boundaries(4) == pytest.approx((4.3326, 2.9631, 2.3590, 2.0141), abs=1e-4)
    assert spending(1.0) == pytest.approx(0.05)
    assert sum(exit_probabilities(4, 0.0)) == pytest.approx(0.05, abs=1e-9)
    for k in (2, 3, 6):
        assert sum(exit_probabilities(k, 0.0)) == pytest.approx(0.05, abs=1e-8)


def test_exit_probabilities_against_scipy_multivariate_normal():
    """P(no stop at looks 1..3) of K = 3 under no change: the canonical joint normal
    (corr sqrt(t_i / t_j)) integrated by scipy over the continuation box."""
    cs = boundaries(3)
    t = np.arange(1, 4) / 3
    r = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    inside = stats.multivariate_normal.cdf(np.array(cs), np.zeros(3), r, lower_limit=-np.array(cs),
                                           abseps=1e-8, releps=1e-8, rng=np.random.default_rng(1))
    assert 1 - inside == pytest.approx(0.05, abs=2e-5)
    assert nominal_alpha(3)[-1] == pytest.approx(2 * stats.norm.sf(cs[-1]))


def test_critical_table_is_the_t_quantile_at_each_looks_nominal_level():
    b = critical_table(3, 10)
    for k, p in enumerate(b.nominal):
        for df in (1, 5, 10):
            assert b.critical[k][df - 1] == pytest.approx(stats.t.isf(p / 2, df), rel=1e-5)


def test_looks_module_imports_the_standard_library_only():
    """The job runs this file with the client's Python: no slurm_ab, numpy or scipy."""
    tree = ast.parse(open(looks.__file__).read())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "json", "math", "re", "sys"}, mods
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def test_mode_effect_is_statsmodels_ols_on_mode_and_position():
    from statsmodels.regression.linear_model import OLS
    rng = random.Random(3)
    units = [(i, m == "B", math.log(100) + (0.05 if m == "B" else 0) + 0.002 * i + rng.gauss(0, 0.02))
             for i, m in enumerate("ABBAABBAABBA", 1)]
    est, se, df = looks.mode_effect(units)
    x = np.array([[1.0, float(b), float(p)] for p, b, _ in units])
    fit = OLS(np.array([y for _, _, y in units]), x).fit()
    assert (est, se, df) == pytest.approx((fit.params[1], fit.bse[1], fit.df_resid), rel=1e-9)
    assert looks.mode_effect(units[:3]) is None


def _spec(k_max: int, margin: float = 3.0) -> dict:
    b = critical_table(k_max, 4 * k_max)
    return {"critical": [list(r) for r in b.critical], "blocks": [[0]] * k_max, "margin_pct": margin,
            "better": "higher", "log": True}


def _units(blocks: int, effect: float, sd: float, seed: int = 1):
    rng = random.Random(seed)
    return [(4 * b + j + 1, m == "B", math.log1p(effect if m == "B" else 0.0) + rng.gauss(0, sd))
            for b in range(blocks) for j, m in enumerate("ABBA")]


def test_a_look_decides_better_worse_equivalent_or_goes_on():
    spec = _spec(4)
    assert looks.decide(_units(1, -0.2, 0.01), 1, spec)["decision"] == "continue"   # df 1: never at look 1
    d = looks.decide(_units(2, -0.2, 0.01), 2, spec)
    assert d["decision"] == "worse" and d["high_pct"] < 0 and d["df"] == 5
    assert looks.decide(_units(2, 0.2, 0.01), 2, spec)["decision"] == "better"
    eq = looks.decide(_units(3, 0.0, 0.002), 3, spec)
    assert eq["decision"] == "equivalent" and -3 < eq["low_pct"] < 0 < eq["high_pct"] < 3
    assert looks.decide(_units(2, 0.0, 0.002), 2, _spec(4, 0.0))["decision"] == "continue"   # no margin
    assert looks.decide(_units(4, 0.0, 0.05), 4, spec)["decision"] == looks.MAX_DECISION
    lower = dict(spec, better="lower")
    assert looks.decide(_units(2, -0.2, 0.01), 2, lower)["decision"] == "better"


def test_a_look_reads_the_clients_own_files(tmp_path):
    """Steady-state block of the client log first, else the record's makespan figure; a pass
    without a value is named as missing."""
    spec = dict(_spec(2), metric="output_tps", a="x", b="y", launches=[], blocks=[[1, 2, 3, 4], [5, 6, 7, 8]])
    for i, m in enumerate("xyyxxyyx", 1):
        d = tmp_path / f"launch{i}-{m}"
        (d / "logs").mkdir(parents=True)
        v = 100.0 * (1.3 if m == "y" else 1.0) * (1 + 0.01 * ((i * 7) % 5 - 2))
        (d / "bench-c8-r1.jsonl").write_text('{"output_throughput": %r}\n{"cut' % (v * 0.9))
        if i != 3:
            (d / "logs" / "client-c8-r1.log").write_text(
                "==== Steady-State Result ====\nOutput token throughput (tok/s):   %.2f\n" % v)
        spec["launches"].append({"index": i, "mode": m, "dir": d.name, "passes": [
            {"key": "c8-r1", "bench": "bench-c8-r1.jsonl", "client_log": "logs/client-c8-r1.log"},
            {"key": "c8-r2", "bench": "bench-c8-r2.jsonl", "client_log": "logs/client-c8-r2.log"}]})
    out = looks.look(spec, 2, str(tmp_path))
    assert out["passes"] == 8 and out["missing"].count(":c8-r2") == 8
    assert out["decision"] == "better" and 20 < out["estimate_pct"] < 40
    assert looks.pass_value("output_tps", str(tmp_path / "launch3-y/bench-c8-r1.jsonl"),
                            str(tmp_path / "launch3-y/logs/client-c8-r1.log"))[1] == "record"
    line = " ".join(looks.fields(out))
    assert line.startswith("look=2 blocks=2 of=2 launches_a=4 launches_b=4 passes=8 ") and "decision=better" in line
