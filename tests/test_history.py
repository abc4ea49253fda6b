"""The history (issue 34 item 3): its index of collected runs and the change-point detector.

30 collected runs are synthesised from one real run (tests/fixtures/runs/tp32-stored, collected
here): each a copy of its manifest and summary.json, submitted a day apart, its figures moved by a
lognormal run-to-run noise of 2 % (the emulator's launch-to-launch CoV of tp32 is 1.8 %,
docs/statistics.md) and, for the slowed series, every time 8 % longer from run 20 on (throughput
/ 1.08, latencies x 1.08: the emulator slowed by 8 %). The detector must flag run 20 (+-1) there
and nothing in an unchanged series; the index rebuilds to the same content and works with
results/ on a read-only mount.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT
from slurm_ab.ab_stats.changepoints import IMPROVEMENT, REGRESSION, Point, _best_split, detect, e_divisive
from slurm_ab.collect import collect_and_write
from slurm_ab.collect.history import build
from slurm_ab.collect.index import content, points, update
from slurm_ab.collect.rows import summary_record
from slurm_ab.collect.write import read_summary
from slurm_ab.model.experiment import History
from slurm_ab.model.rundir import Layout, read_manifest, write_manifest

STORED = ROOT / "tests" / "fixtures" / "runs" / "tp32-stored"
SETTINGS = History()


def _scaled_bench(b, f: float):
    """The client's figures of a server whose every time is 1/f as long."""
    lat = lambda x: None if x is None else replace(x, **{k: (v / f if v is not None else None)  # noqa: E731
                                                     for k, v in x.__dict__.items()})
    return replace(b, input_tps=b.input_tps * f, output_tps=b.output_tps * f, duration_s=b.duration_s / f,
                   ttft=lat(b.ttft), tpot=lat(b.tpot), e2e=lat(b.e2e),
                   steady=replace(b.steady, output_tps=b.steady.output_tps * f) if b.steady else None)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The stored real run, collected (its summary.json is what the history reads)."""
    d = tmp_path_factory.mktemp("real") / "tp32-stored"
    shutil.copytree(STORED, d)
    collect_and_write(d, report=False)
    return d


def synthesise(real: Path, results: Path, n: int = 30, slow_from: int | None = 20, slowdown: float = 1.08,
               seed: int = 7) -> list[str]:
    """n run directories under results made from `real` (module doc); their run ids, oldest first."""
    rng = np.random.default_rng(seed)
    cs = read_summary(real)
    m = read_manifest(real)
    ids = []
    for k in range(1, n + 1):
        f = float(np.exp(rng.normal(0.0, 0.02)))
        if slow_from is not None and k >= slow_from:
            f /= slowdown
        rid = f"tp32-day{k:02d}"
        d = results / rid
        d.mkdir(parents=True)
        shutil.copy(Layout(real).events, Layout(d).events)
        write_manifest(d, replace(m, run_id=rid, submitted_at=f"2026-10-{k:02d}T09:00:00+0000"))
        passes = tuple(replace(p, run_id=rid, bench=_scaled_bench(p.bench, f)) for p in cs.passes)
        Layout(d).summary("json").write_text(json.dumps(summary_record(replace(cs, run_id=rid, passes=passes))))
        ids.append(rid)
    return ids


def _series(results: Path, index: Path):
    update(results, index)
    (s,) = build(points(index), SETTINGS)
    return s


def test_a_run_slowed_8_percent_is_flagged_where_it_began(real, tmp_path):
    ids = synthesise(real, tmp_path / "results")
    s = _series(tmp_path / "results", tmp_path / "index.sqlite")
    assert [p.run_id for p in s.points] == ids and s.metric == "steady_output_tps"
    (c,) = s.changes
    assert c.kind == REGRESSION and abs(c.index - 19) <= 1, c
    assert -10.5 < c.change_pct < -5.0 and c.ci_pct[1] < 0 and c.p_value < SETTINGS.alpha


def test_an_unchanged_configuration_flags_nothing(real, tmp_path):
    synthesise(real, tmp_path / "results", slow_from=None)
    s = _series(tmp_path / "results", tmp_path / "index.sqlite")
    assert len(s.points) == 30 and s.changes == ()


def test_the_index_rebuilds_to_the_same_content_and_follows_results(real, tmp_path):
    results = tmp_path / "results"
    synthesise(real, results, n=12)
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    first = update(results, a)
    assert (first.added, first.refreshed, first.removed) == (12, 0, 0)
    assert update(results, a).added == 0                 # nothing changed: nothing re-read
    shutil.rmtree(results / "tp32-day03")                # a run removed, another re-collected
    s = results / "tp32-day05" / "summary.json"
    s.write_text(s.read_text().replace('"run_id": "tp32-day05"', '"run_id": "tp32-day05" '))
    again = update(results, a)
    assert (again.added, again.refreshed, again.removed) == (0, 1, 1)
    update(results, b, rebuild=True)
    assert content(a) == content(b)
    assert len({r[0] for r in content(b)["runs"]}) == 11


def test_the_history_works_with_results_on_a_read_only_mount(real, tmp_path):
    """`slurm-ab history` on a read-only bind mount of results/ (a private mount namespace)."""
    results = tmp_path / "results"
    synthesise(real, results, n=10, slow_from=None)
    ro = tmp_path / "ro"
    ro.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "SLURM_AB_RESULTS": str(ro)}
    cmd = (f"mount --bind {results} {ro} && mount -o remount,ro,bind {ro} && "
           f"! touch {ro}/probe 2>/dev/null && {sys.executable} -m slurm_ab history --site example --format json")
    r = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0 and "unshare" in r.stderr and not os.environ.get("CI"):
        pytest.skip(f"no private mount namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    (series,) = json.loads(r.stdout)["series"]
    assert len(series["points"]) == 10 and series["changes"] == []
    assert not list(results.rglob("*.sqlite*")) and (tmp_path / "cache" / "slurm-ab").is_dir()


def test_the_index_refuses_a_place_under_results(tmp_path):
    (tmp_path / "results").mkdir()
    r = subprocess.run([sys.executable, "-m", "slurm_ab", "history", "--site", "example",
                        "--index", str(tmp_path / "results" / "h.sqlite")], capture_output=True, text=True,
                       env={**os.environ, "SLURM_AB_RESULTS": str(tmp_path / "results")})
    assert r.returncode == 2 and "--index" in r.stderr and "lies under the results directory" in r.stderr


def test_history_settings_are_checked(tmp_path):
    r = subprocess.run([sys.executable, "-m", "slurm_ab", "history", "--site", "example", "--set", "history.alpha=0.5",
                        "--metric", "nope"], capture_output=True, text=True,
                       env={**os.environ, "SLURM_AB_RESULTS": str(tmp_path)})
    assert r.returncode == 2
    assert "history.alpha = 0.5: not a significance level" in r.stderr and "--metric = 'nope': unknown metric" in r.stderr


# ---- the detector itself ---------------------------------------------------------------------------

def _q(x, tau):
    """Matteson & James' divergence of one split, by brute force (no prefix sums)."""
    a, b = x[:tau], x[tau:]
    m, n = len(a), len(x)
    between = sum(abs(i - j) for i in a for j in b)
    wa = sum(abs(a[i] - a[k]) for i in range(m) for k in range(i + 1, m))
    wb = sum(abs(b[i] - b[k]) for i in range(n - m) for k in range(i + 1, n - m))
    return m * (n - m) / n * (2 * between / (m * (n - m)) - wa / (m * (m - 1) / 2) - wb / ((n - m) * (n - m - 1) / 2))


def test_the_split_statistic_is_matteson_and_james():
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0])
    q, tau = _best_split(x, 0, len(x), 2)
    best = max(range(2, len(x) - 1), key=lambda t: _q(list(x), t))
    assert tau == best and abs(q - _q(list(x), best)) < 1e-9


def test_the_detector_states_direction_and_uses_the_points_intervals():
    rng = np.random.default_rng(3)
    up = [100 * float(np.exp(rng.normal(0, 0.01))) * (1.1 if i >= 12 else 1.0) for i in range(24)]
    (c,) = detect([Point(v) for v in up], "higher")
    assert c.index == 12 and c.kind == IMPROVEMENT and 8 < c.change_pct < 12
    (c,) = detect([Point(v) for v in up], "lower")         # a latency going up is a regression
    assert c.kind == REGRESSION
    # the same means, but every point a campaign whose own interval is wide: not confirmed
    assert detect([Point(v, se=30.0) for v in up], "higher") == []
    assert e_divisive([1.0] * 10 + [5.0] * 10, min_segment=4)[0][0] == 10


def test_unlike_loads_are_never_one_series(real, tmp_path):
    """A point's series key has the load's shape (rows.load_label: C=<C> or <rate> req/s, as the
    collector's aggregates group (mode, concurrency, rate)): open-loop passes at two rates, and a
    closed-loop pass whose C equals an open-loop pass's prompts (its concurrency), are three
    series, never pooled into one point (the index grouped by mode, concurrency, prompts only)."""
    cs, m = read_summary(real), read_manifest(real)
    (p0,) = cs.passes
    n = p0.ref.prompts

    def run(rid: str, day: int, loads):
        d = tmp_path / "results" / rid
        d.mkdir(parents=True)
        shutil.copy(Layout(real).events, Layout(d).events)
        write_manifest(d, replace(m, run_id=rid, submitted_at=f"2026-10-{day:02d}T09:00:00+0000"))
        passes = tuple(replace(p0, run_id=rid, bench=_scaled_bench(p0.bench, f),
                               ref=replace(p0.ref, concurrency=c, rate=q, key=f"q{q:g}-r1" if q else f"c{c}-r1"))
                       for c, q, f in loads)
        Layout(d).summary("json").write_text(json.dumps(summary_record(replace(cs, run_id=rid, passes=passes))))

    for day in (1, 2):
        run(f"open{day}", day, [(n, 2.0, 0.5), (n, 4.0, 1.0)])        # half the throughput at 2 req/s
        run(f"closed{day}", 10 + day, [(n, None, 2.0)])               # C = prompts, closed loop
    # an index of the schema before the load's rate (its points keyed by concurrency alone) is rebuilt
    import sqlite3
    old = sqlite3.connect(str(tmp_path / "index.sqlite"))
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    old.execute("INSERT INTO meta VALUES ('schema', '1')")
    old.commit()
    old.close()
    update(tmp_path / "results", tmp_path / "index.sqlite")
    series = {s.workload.split(" ", 2)[2]: s for s in build(points(tmp_path / "index.sqlite"), SETTINGS)}
    assert sorted(series) == sorted([f"C={n} P={n}", f"2 req/s P={n}", f"4 req/s P={n}"]), series.keys()
    assert [p.run_id for p in series[f"C={n} P={n}"].points] == ["closed1", "closed2"]
    two, four = series[f"2 req/s P={n}"].points, series[f"4 req/s P={n}"].points
    assert [p.run_id for p in two] == [p.run_id for p in four] == ["open1", "open2"]
    assert all(p.n == 1 and p.passes == 1 for p in two + four)
    assert two[0].value == pytest.approx(four[0].value / 2)
