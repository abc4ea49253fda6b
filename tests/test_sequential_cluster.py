"""A sequential campaign on the real local cluster (issue 30): tp32 against tp32-dflash stops
before its maximum with the decision in events.log, and `collect` reproduces every look from the
raw files. One job: SGLang 0.5.2's client, no preflight, one pass of 16 prompts per launch (the
launch is the unit), at most 3 blocks (--launches 6 per mode). On its own look 1 cannot decide (4
launch means regressed on mode and position leave 1 degree of freedom: its critical t is ~115);
the job carries a prior (--prior-from a collected pilot campaign of 6 launches: 3 degrees of
freedom), pooled at every look unless the look's own variance contradicts it (then dropped), and
every look's event and its recomputation say which (prior=used|dropped). Launch-to-
launch noise on this 2-core machine under the suite's load reaches 8 % (launch means ~6 % apart in
the suite's runs): the pilot is made that noisy, so its prior fits and is used at look 1 (where
it decides at 4 launches) unless the guard drops it (by construction in ~1 run of 4: then at
look 2, 8 launches; a pilot of 2 %, as before, was dropped every time). DFlash's own difference
with 128 output tokens (or at time scale 0.02, where the host's jitter dominates) is a few percent
and of either sign: the job runs 512 output tokens with 32 draft tokens at the site's clock (the
emulator's verify cost grows with them: -47 % in its offline simulator), a change no load hides, so
the test checks the stop rule, not the machine. The A/A property (a copy of itself ends
'equivalent' or runs to its maximum) is checked through the same stop rule by simulation in
tests/test_sequential.py (test_an_aa_campaign_ends_equivalent_or_runs_to_its_maximum), not by a
second job."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers import CLIENT_052, SMALL, set_args
from helpers.jobs import slurm_ab
from slurm_ab.model.rundir import Layout

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FAST = ("preflight.enabled=false", *SMALL, "benchmark.output_len=512",
        "modes.tp32-dflash.args.speculative-num-draft-tokens=32")


def _events(run_dir: Path, name: str) -> list[dict]:
    out = []
    for line in Layout(run_dir).events.read_text().splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[3] == name:
            out.append(dict(p.split("=", 1) for p in parts[4:] if "=" in p))
    return out


def test_a_real_change_stops_before_the_maximum_and_collect_reproduces_every_look(tmp_path, local_cluster):
    from test_planner import _campaign_dir
    run_id = f"seq-ab-{int(time.time())}"
    pilot = _campaign_dir(tmp_path / "pilots", launch_sd=0.06)  # a collected campaign (summary.json) of 6 launches x 3 passes
    t0 = time.monotonic()
    r = slurm_ab("submit", "tp32", "tp32-dflash", "--site", "local", "--run-id", run_id, "--wait", "--no-collector",
                 "--no-report", "--sequential", "--launches", "6", "--repeats", "1", "--prior-from", str(pilot),
                 *CLIENT_052, *set_args(*FAST), cwd=tmp_path, timeout=900)
    print(f"sequential tp32 vs tp32-dflash: {time.monotonic() - t0:.0f} s")
    for x in _events(tmp_path / "results" / run_id, "sequential_look"):
        print(" ".join(f"{k}={v}" for k, v in x.items()))
    run_dir = tmp_path / "results" / run_id
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    looks = _events(run_dir, "sequential_look")
    (stop,) = _events(run_dir, "sequential_stop")
    assert stop["decision"] in ("better", "worse") and int(stop["launches_run"]) < 12      # 3 blocks at most
    assert [x["look"] for x in looks] == [str(k) for k in range(1, int(stop["look"]) + 1)]
    assert looks[-1]["decision"] == stop["decision"] and all(x["decision"] == "continue" for x in looks[:-1])
    assert all(x["prior"] in ("used", "dropped") for x in looks), looks       # each look says whether it pooled
    assert all(int(x["df"]) == 4 * int(x["look"]) - 3 + (3 if x["prior"] == "used" else 0) for x in looks), looks
    started = [int(x["launch"]) for x in _events(run_dir, "launch_start")]
    assert started == list(range(1, int(stop["launches_run"]) + 1))            # never mid-block
    assert int(stop["launches_run"]) % 4 == 0
    # the job's record, then the collector run again on the raw files (idempotent, same looks)
    for again in (False, True):
        s = json.loads(Layout(run_dir).summary("json").read_text())
        seq = s["sequential"]
        assert seq["agree"] and seq["stopped_at"] == int(stop["look"]) and seq["decision"] == stop["decision"]
        assert [x["look"] for x in seq["looks"]] == [int(x["look"]) for x in looks]
        for x, logged in zip(seq["looks"], looks):      # the job's line, field by field, equals the recomputation
            assert x["job"] == x["recomputed"] == " ".join(f"{k}={v}" for k, v in logged.items()), x
        primary = s["comparisons"][0]["metrics"][0]
        assert primary["verdict"] == stop["decision"] and primary["p_value"] is None
        assert primary["ci_low_pct"] == pytest.approx(float(looks[-1]["low_pct"]), rel=1e-5)
        assert primary["ci_high_pct"] == pytest.approx(float(looks[-1]["high_pct"]), rel=1e-5)
        skipped = [la for la in s["launches"] if la["status"].startswith("skipped")]
        assert len(skipped) == 12 - int(stop["launches_run"])
        if not again:
            c = slurm_ab("collect", str(run_dir), cwd=tmp_path, timeout=300)
            assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
    assert "sequential: stopped at look" in r.stdout + c.stdout
