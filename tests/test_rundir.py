"""The run directory's owner: its layout, the Manifest (current and older layouts), who a run is."""
import dataclasses
import json

import pytest

from helpers.rundir_builder import build_run
from slurm_ab.model import rundir
from slurm_ab.collect import collect_run
from slurm_ab.model.experiment import Experiment
from slurm_ab.model.rundir import Layout, Manifest


@pytest.fixture
def rendered(cli, tmp_path):
    code, _, err = cli("render", "pp8", "--run-id", "r1")
    assert code == 0, err
    return tmp_path / "results" / "r1"


def test_render_writes_the_current_manifest_and_it_reads_back_unchanged(rendered):
    text = Layout(rendered).manifest.read_text()
    m = rundir.read_manifest(rendered)
    assert (m.run_id, m.mode, m.mode_description, m.job_id) == ("r1", "pp8", "2 x TP4/PP8/EP4", None)
    assert m.replicas == 2 and "replicas" not in json.loads(text)   # only under config
    assert m.benchmark["num_prompts"] == 40 and m.warmup_input_len == 16384
    assert [c["het_group"] for c in m.components] == [0, 1] and m.nodes is None
    assert m.to_json() == text                                      # byte-identical round trip
    assert not rundir.submitted(rendered)


def test_the_flat_manifest_of_the_fixtures_still_loads(tmp_path):
    run = build_run(tmp_path)
    raw = json.loads(Layout(run).manifest.read_text())
    assert "config" not in raw and raw["replicas"] == 2               # the older, flat layout
    m = rundir.read_manifest(run)
    assert (m.run_id, m.mode, m.job_id) == (raw["run_id"], "tp32", "4242")
    assert m.mode_description == raw["description"] == "2 x TP32/PP1/EP4"
    assert m.replicas == 2 and m.warmup_input_len == 16384
    assert raw["benchmark"].items() <= m.benchmark.items()           # typed, defaults added


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
    m = rundir.read_manifest(run)
    rundir.write_manifest(run, Manifest(run_id=m.run_id, mode=m.mode, job_id=m.job_id,
                                        config=dataclasses.replace(m.config, replicas=3)))
    assert "config" in json.loads(Layout(run).manifest.read_text())
    s = collect_run(run, workers=1)
    assert [r.replica for r in s.replicas] == [0, 1, 2]
    assert any("replica 2" in text for text in s.reasons + s.notes)
