"""The campaign collector on run directories built from the seed's data (no cluster)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.rundir_builder import KEY, TP32_DFLASH, RunSpec, build_oom_run, build_run, launch_layout
from slurm_ab.model.campaign import schedule
from slurm_ab.model.rundir import Layout
from slurm_ab.collect.campaign import collect
from slurm_ab.collect.rows import summary_record
from slurm_ab.collect.write import write_summary
from slurm_ab.parse.events import read_events


def collect_campaign(root: Path) -> dict:
    """A job collected into its summary.json's record."""
    return summary_record(collect(root))


def _as_launch(run: Path, dest: Path, key: str = KEY) -> Path:
    """A built run's launch moved to another job's launch directory `dest`, its pass named `key`."""
    lay = launch_layout(run)
    moved = Layout(lay.root.rename(dest))
    if key != KEY:
        for old, new in ((lay.bench, moved.bench), (lay.client_log, moved.client_log)):
            src = Layout(dest).root / old(KEY).relative_to(lay.root)
            if src.exists():
                src.rename(new(key))
        ev = moved.events.read_text().replace(f"pass={KEY} ", f"pass={key} ")
        moved.events.write_text(ev.replace("repeat=1", f"repeat={key.split('-r')[1]}"))
    return dest


def _campaign(tmp_path: Path, second_fails: bool = False) -> Path:
    root = tmp_path / "camp"
    root.mkdir()
    c = schedule(("tp32", "tp32-dflash"), 1, (8,), "blocked", False, 40)
    _as_launch(build_run(tmp_path), Layout(root).launch(c.launches[0]).root)
    second = build_oom_run(tmp_path) if second_fails else \
        build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    _as_launch(second, Layout(root).launch(c.launches[1]).root)
    Layout(root).manifest.write_text(json.dumps({
        "run_id": "camp", "job_id": "4242", "mode": "tp32+tp32-dflash",
        "config": {"replicas": 2}, "campaign": c.to_dict()}))
    Layout(root).events.write_text(
        "1788000000.000 2026-09-02 12:00:00.000 job_start job_id=4242 run_id=camp\n"
        "1788000001.000 2026-09-02 12:00:01.000 launch_end launch=1 mode=tp32 status=ok rc=0\n"
        f"1788000002.000 2026-09-02 12:00:02.000 launch_end launch=2 mode=tp32-dflash "
        f"status={'failed rc=1' if second_fails else 'ok rc=0'}\n")
    return root


def test_each_pass_is_collected_like_a_run_of_one_pass(tmp_path):
    result = collect_campaign(_campaign(tmp_path))
    rows = {r["mode"]: r for r in result["rows"]}
    assert [r["verdict"] for r in result["rows"]] == ["ok", "ok"]
    # the seed's numbers, per pass, exactly as a run of one mode gives them
    assert rows["tp32"]["output_tps"] == pytest.approx(20480 / 238.18)
    assert rows["tp32"]["ttft_p95_s"] == pytest.approx(20.79)
    assert rows["tp32-dflash"]["accept_len"] == pytest.approx(3.76, abs=0.005)
    (cmp,) = result["comparisons"]
    out = {m["metric"]: m for m in cmp["metrics"]}
    assert out["output_tps"]["change_pct"] == pytest.approx(-20.69, abs=0.005)
    assert out["output_tps"]["verdict"] == "inconclusive (n=1)"
    assert "within one launch only" in result["variance"]
    assert [la["status"] for la in result["launches"]] == ["ok", "ok"]


def test_a_failed_launch_keeps_the_other_modes_passes(tmp_path):
    result = collect_campaign(_campaign(tmp_path, second_fails=True))
    ok, failed = result["rows"]
    assert ok["verdict"] == "ok" and failed["verdict"] == "failed"
    assert "out of memory" in failed["reason"].lower()
    assert "launch2-tp32-dflash/logs/server-r1-n2.log" in failed["reason"]
    assert result["launches"][1]["status"] == "failed"
    agg = {a["mode"]: a for a in result["aggregates"]}
    assert agg["tp32"]["passes_ok"] == 1 and agg["tp32-dflash"]["passes_ok"] == 0


def test_writing_is_idempotent_and_raw_files_untouched(tmp_path):
    root = _campaign(tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    written = write_summary(collect(root), root)
    assert sorted(p.name for p in written) == ["summary.csv", "summary.json", "summary.md"]
    assert write_summary(collect(root), root) == []
    assert all(p.read_bytes() == b for p, b in before.items())
    md = Layout(root).summary("md").read_text()
    assert "## tp32-dflash vs tp32 at concurrency 8" in md and "inconclusive (n=1)" in md
    csv = Layout(root).summary("csv").read_text().splitlines()
    assert len(csv) == 3 and "mode" in csv[0] and "repeat" in csv[0]


def test_a_pass_view_keeps_only_this_pass_window(tmp_path):
    ev = tmp_path / "events.log"
    ev.write_text("\n".join([
        "1.000 2026-09-02 12:00:01.000 ready replica=0",
        "2.000 2026-09-02 12:00:02.000 bench_start pass=c8-r1",
        "3.000 2026-09-02 12:00:03.000 metrics_scrape target=r0 phase=during",
        "4.000 2026-09-02 12:00:04.000 bench_end pass=c8-r1 rc=0",
        "4.100 2026-09-02 12:00:04.100 metrics_scrape target=r0n0 phase=end",
        "5.000 2026-09-02 12:00:05.000 bench_start pass=c8-r2",
        "6.000 2026-09-02 12:00:06.000 bench_end pass=c8-r2 rc=0",
        "6.100 2026-09-02 12:00:06.100 metrics_scrape target=r0n0 phase=end",
        "6.200 2026-09-02 12:00:06.200 teardown reason=launch-end",
        "7.000 2026-09-02 12:00:07.000 bench_start pass=c8-r3",
        "8.000 2026-09-02 12:00:08.000 fail kind=step_exited",
    ]) + "\n")
    events = read_events(ev)
    # a pass keeps its own end scrapes (taken after its client exits), not what follows them
    view, rc = events.pass_view("c8-r1")
    assert rc == 0 and [e.line for e in view.events] == [1, 2, 3, 4, 5]
    view, rc = events.pass_view("c8-r2")
    assert rc == 0 and [e.line for e in view.events] == [1, 6, 7, 8]
    view, rc = events.pass_view("c8-r3")
    assert rc is None and [e.line for e in view.events] == [1, 9, 10, 11]
    # the job's end stays in every pass's view, wherever it stands
    ev.write_text(ev.read_text() + "9.000 2026-09-02 12:00:09.000 job_end rc=1\n")
    view, _ = read_events(ev).pass_view("c8-r1")
    assert [e.line for e in view.events] == [1, 2, 3, 4, 5, 12]
    assert events.pass_view("c1-r1") == (None, None)


def test_a_launch_of_three_passes_reads_each_server_log_once(tmp_path):
    """The pass is the unit of collection, but a launch's server logs are scanned once for all
    its passes (issue 17): three pass windows cut from one benchmark, each counted on its own."""
    from datetime import datetime

    from slurm_ab.parse.server_scan import counting_scans

    root = tmp_path / "camp"
    root.mkdir()
    c = schedule(("tp32-dflash",), 3, (8,), "blocked", False, 40)
    lay = Layout(_as_launch(build_run(tmp_path, RunSpec(target=TP32_DFLASH)),
                            Layout(root).launch(c.launches[0]).root))
    for k in (2, 3):
        lay.bench(f"c8-r{k}").write_bytes(lay.bench(KEY).read_bytes())
        lay.client_log(f"c8-r{k}").write_bytes(lay.client_log(KEY).read_bytes())
    lines = lay.events.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if " bench_start " in ln)
    end = next(i for i, ln in enumerate(lines) if " bench_end " in ln)
    t0, t1 = (datetime.strptime(" ".join(lines[i].split()[1:3]), "%Y-%m-%d %H:%M:%S.%f")
              for i in (start, end))
    cut = [t0 + (t1 - t0) * f for f in (0, 1 / 3, 2 / 3, 1)]

    def ev(t, text):
        return f"{t.timestamp():.3f} {t.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} {text}"
    windows = []
    for k in (1, 2, 3):
        windows += [ev(cut[k - 1], f"bench_start pass=c8-r{k} concurrency=8 repeat={k} prompts=40"),
                    ev(cut[k], f"bench_end pass=c8-r{k} rc=0")]
    lay.events.write_text("\n".join(lines[:start] + windows + lines[end + 1:]) + "\n")
    Layout(root).manifest.write_text(json.dumps({
        "run_id": "camp", "job_id": "4242", "mode": "tp32-dflash", "config": {"replicas": 2},
        "campaign": c.to_dict()}))
    logs = lay.server_logs()
    assert logs
    with counting_scans() as reads:
        result = collect_campaign(root)
    assert [r["pass"] for r in result["rows"]] == ["c8-r1", "c8-r2", "c8-r3"]
    assert all(r["verdict"] == "ok" for r in result["rows"]), [r["reason"] for r in result["rows"]]
    assert reads and set(reads.values()) == {1}
    assert {Path(p) for p in reads} <= set(logs)
    # every pass counts the decode samples of its own third of the benchmark, none twice
    from helpers.rundir_builder import collect_one as collect_run
    (root.parent / "w").mkdir()
    whole = build_run(root.parent / "w", RunSpec(target=TP32_DFLASH))
    per_pass = [r["accept_samples"] for r in result["rows"]]
    assert all(per_pass) and sum(per_pass) == collect_run(whole).accept.samples == 37


def test_a_campaign_stopped_at_a_block_boundary_reports_the_design_it_ran(tmp_path):
    """The job did not start block 2 (time_stop: it could not finish in the time left): launches 5-8
    are 'skipped (time)', not failures; the record says which block, why and the design that ran
    (2 launches of each mode, balanced); the intervals' variance is that design's (issue 31)."""
    from slurm_ab.tables.campaign import campaign_md
    root = tmp_path / "camp"
    root.mkdir()
    c = schedule(("tp32", "tp32-dflash"), 1, (8,), "counterbalanced", False, 40, launches=4)
    assert c.blocks == ((1, 2, 3, 4), (5, 6, 7, 8))
    for launch in c.launches[:4]:
        spec = RunSpec() if launch.mode == "tp32" else RunSpec(target=TP32_DFLASH)
        _as_launch(build_run(tmp_path, spec), Layout(root).launch(launch).root, launch.passes[0].key)
    Layout(root).manifest.write_text(json.dumps({
        "run_id": "camp", "job_id": "4242", "mode": "tp32+tp32-dflash",
        "config": {"replicas": 2}, "campaign": c.to_dict()}))
    lines = ["1788000000.000 2026-09-02 12:00:00.000 job_start job_id=4242 run_id=camp",
             "1788000000.500 2026-09-02 12:00:00.500 time_check block=1 launch=1 need_s=3000 left_s=7000"]
    for launch in c.launches[:4]:
        lines.append(f"1788000001.000 2026-09-02 12:00:01.000 launch_end launch={launch.index} mode={launch.mode} "
                     "status=ok rc=0")
    lines += ["1788003600.000 2026-09-02 13:00:00.000 time_check block=2 launch=5 need_s=3600 left_s=3100",
              "1788003600.000 2026-09-02 13:00:00.000 time_stop block=2 blocks=2 launches_run=4 launches_planned=8 "
              "need_s=3600 left_s=3100"]
    Layout(root).events.write_text("\n".join(lines) + "\n")
    cs = collect(root)
    result = summary_record(cs)
    assert [la["status"] for la in result["launches"]] == ["ok"] * 4 + ["skipped (time)"] * 4
    assert result["launches"][4]["passes"] == ["c8-r3: skipped (time)"]      # tp32's third launch
    assert len(result["passes"]) == 4 and {r["verdict"] for r in result["passes"]} == {"ok"}
    stop = result["stop"]
    assert (stop["reason"], stop["block"], stop["blocks"], stop["launches_run"], stop["launches_planned"],
            stop["need_s"], stop["left_s"]) == ("time", 2, 2, 4, 8, 3600, 3100)
    assert stop["design"] == "launches 1-4 of 8 (1 of 2 block(s)): tp32 2, tp32-dflash 2 launch(es)"
    assert "every mode ran in at least 2 server launches" in result["variance"]
    (cmp,) = result["comparisons"]
    assert "launch" in cmp["metrics"][0]["variance_levels"]
    assert cs.stop.launches_run == 4 and len(cs.design.launches) == 4
    md = campaign_md(cs)
    assert ("Stopped at a block boundary (time): block 2 of 2 was not started, it needed ~3600 s and the job "
            "had 3100 s left before its own early stop; design run: launches 1-4 of 8") in md
