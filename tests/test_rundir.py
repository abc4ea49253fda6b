"""The run directory's owner: its layout (and the one adapter of older run directories), the
Manifest, who a run is."""
import dataclasses
import json

import pytest

from helpers import ROOT
from helpers.rundir_builder import build_run, launch_layout
from slurm_ab.model import rundir
from helpers.rundir_builder import collect_one as collect_run
from slurm_ab.model.experiment import Experiment
from slurm_ab.model.rundir import Layout, Manifest

FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def rendered(cli, tmp_path):
    code, _, err = cli("render", "pp8", "--run-id", "r1")
    assert code == 0, err
    return tmp_path / "results" / "r1"


def test_render_writes_the_current_manifest_and_it_reads_back_unchanged(rendered):
    text = Layout(rendered).manifest.read_text()
    m = rundir.read_manifest(rendered)
    assert (m.run_id, m.mode, m.mode_description, m.job_id) == ("r1", "pp8", "pp8 (2 x TP4/PP8/EP4)", None)
    assert m.replicas == 2 and "replicas" not in json.loads(text)   # only under config
    assert m.benchmark["num_prompts"] == 40 and m.warmup_input_len == 16384
    assert [c["het_group"] for c in m.components] == [0, 1] and m.nodes is None
    assert m.to_json() == text                                      # byte-identical round trip
    assert not rundir.submitted(rendered)
    # a run of one mode is the campaign of one launch and one pass, its launch's own manifest
    (launch,) = m.campaign.launches
    assert [p.key for p in launch.passes] == ["c8-r1"]
    lm = rundir.read_manifest(Layout(rendered).launch(launch).root)
    assert (lm.mode, lm.mode_description, lm.launch, lm.campaign) == ("pp8", "2 x TP4/PP8/EP4", launch, None)


def test_an_old_run_directory_reads_through_the_one_adapter():
    """A run directory from before launch directories (tests/fixtures/report/dev-tp32, a real
    run of the local cluster): one pass in the run directory itself, bench.jsonl and
    logs/client.log; its manifest has no campaign and its events no launch."""
    old = FIXTURES / "report" / "dev-tp32"
    run = rundir.open_run(old)
    assert isinstance(run.layout, rundir.OldRunLayout) and run.layout.root == old
    (launch,) = run.campaign.launches
    assert (launch.mode, [p.key for p in launch.passes]) == ("tp32", ["c8-r1"])
    lay = run.launch_layout(launch)
    assert lay.root == old and lay.events == old / "events.log"
    assert lay.bench("c8-r1") == old / "bench.jsonl" and lay.client_log("c8-r1") == old / "logs" / "client.log"
    assert lay.bench("c8-r1").is_file() and lay.client_log("c8-r1").is_file()
    assert [p.name for p in lay.pass_files()] == ["bench.jsonl", "client.log"]
    s = collect_run(old, workers=1)
    assert (s.verdict, round(s.bench.output_tps, 2), s.ref.key) == ("ok", 1535.63, "c8-r1")


def test_a_directory_without_manifest_is_read_from_its_events(tmp_path):
    """A script submitted again writes beside its run directory, without a manifest
    (Layout.resubmitted): its launches and passes are those its events recorded."""
    run = build_run(tmp_path)
    Layout(run).manifest.unlink()
    r = rundir.open_run(run)
    assert type(r.layout) is Layout
    (launch,) = r.campaign.launches
    assert (launch.index, launch.mode, [(p.key, p.prompts) for p in launch.passes]) == (1, "tp32", [("c8-r1", 40)])
    assert collect_run(run, workers=1).verdict == "ok"
    # its schedule (launch_plan) says the pass even when the launch never reached it
    lay = Layout(run).launch(launch)
    lay.events.write_text("".join(ln for ln in lay.events.read_text().splitlines(True) if " bench_" not in ln))
    (launch,) = rundir.open_run(run).campaign.launches
    assert [p.key for p in launch.passes] == ["c8-r1"]
    # a job from before launch_plan lines: the launches it started, with the passes that started
    job = Layout(run).events
    job.write_text("".join(ln for ln in job.read_text().splitlines(True) if " launch_plan " not in ln))
    (launch,) = rundir.open_run(run).campaign.launches
    assert (launch.mode, launch.passes) == ("tp32", ())


@pytest.mark.parametrize("text", [None, "", "{bad", "[1, 2]", '"x"'])
def test_a_missing_or_broken_manifest_is_none(tmp_path, text):
    if text is not None:
        (tmp_path / "manifest.json").write_text(text)
    assert rundir.read_manifest(tmp_path) is None


def test_nodes_are_recorded_once_and_unknown_keys_survive(tmp_path):
    m = Manifest(run_id="r", job_id="7", config=Experiment.from_dict({"replicas": 2}))
    raw = {**m.to_dict(), "written_by_a_newer_version": {"x": 1}}
    Layout(tmp_path).manifest.write_text(json.dumps(raw))
    rundir.record_nodes(tmp_path, {"0": "node[01-04]", "1": "node[05-08]"})
    rundir.record_nodes(tmp_path, {"0": "other"})                     # never changed afterwards
    after = json.loads(Layout(tmp_path).manifest.read_text())
    assert after["nodes"] == {"het_group_0": "node[01-04]", "het_group_1": "node[05-08]"}
    assert after["written_by_a_newer_version"] == {"x": 1} and after["job_id"] == "7"
    rundir.record_nodes(tmp_path / "nowhere", {"0": "n"})             # no manifest: nothing


def test_identify_manifest_then_events_then_directory_name(tmp_path):
    run = tmp_path / "dp2-tp32-dflash-20260902-123051"
    run.mkdir()
    assert rundir.identify(run) == rundir.Identity(run.name, None, None)   # no mode guessed
    Layout(run).events.write_text(
        "1.0 2026-09-02 12:30:51.000 job_start job_id=23 run_id=plain mode=pp8 batch_host=n1\n")
    assert rundir.identify(run) == rundir.Identity("plain", "23", "pp8")
    rundir.write_manifest(run, Manifest(run_id="sub", mode="tp32", job_id="24"))
    assert rundir.identify(run) == rundir.Identity("sub", "24", "tp32")
    assert rundir.job_id_of(run) == "24" and rundir.submitted(run)


def test_the_replica_count_comes_from_the_manifest(tmp_path):
    # a replica that left no trace at all (no event, no log) is still reported, because the
    # manifest says how many replicas the run had (config.replicas)
    run = build_run(tmp_path)
    launch = launch_layout(run).root                                 # the launch's mode's config
    m = rundir.read_manifest(launch)
    rundir.write_manifest(launch, dataclasses.replace(m, config=dataclasses.replace(m.config, replicas=3)))
    assert "config" in json.loads(Layout(launch).manifest.read_text())
    s = collect_run(run, workers=1)
    assert [r.replica for r in s.replicas] == [0, 1, 2]
    assert any("replica 2" in text for text in s.reasons + s.notes)
