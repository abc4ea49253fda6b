"""The one list of Slurm job states (slurm.py), as watch and the collector read them; node states
as the verdict says them."""
import pytest

from slurm_ab.model import slurm
from slurm_ab.collect.job import job_info
from slurm_ab.collect.verdict import node_reasons, state_verdict
from slurm_ab.parse.diagnose import Finding
from slurm_ab.parse.events import EventLog, read_events

# squeue(1) "JOB STATE CODES", Slurm 22.05: every state a job can be in
SQUEUE_STATES = """BOOT_FAIL CANCELLED COMPLETED CONFIGURING COMPLETING DEADLINE FAILED NODE_FAIL
OUT_OF_MEMORY PENDING PREEMPTED RUNNING RESV_DEL_HOLD REQUEUE_FED REQUEUE_HOLD REQUEUED RESIZING
REVOKED SIGNALING SPECIAL_EXIT STAGE_OUT STOPPED SUSPENDED TIMEOUT""".split()


def test_every_state_is_either_active_or_terminal_exactly_once():
    assert slurm.PENDING_STATES.isdisjoint(slurm.RUNNING_STATES)
    assert slurm.ACTIVE_STATES.isdisjoint(slurm.TERMINAL_STATES)
    assert sorted(slurm.ACTIVE_STATES | slurm.TERMINAL_STATES) == sorted(SQUEUE_STATES)
    parts = (slurm.COMPLETED_STATES, slurm.CANCELLED_STATES, slurm.TIMEOUT_STATES,
             slurm.FAILED_STATES)
    assert sum(len(p) for p in parts) == len(slurm.TERMINAL_STATES)


@pytest.mark.parametrize("raw,base", [("CANCELLED by 1000", "CANCELLED"), ("CANCELLED+", "CANCELLED"),
                                      ("running", "RUNNING"), ("", None), (None, None), ("  ", None)])
def test_base_state(raw, base):
    assert slurm.base_state(raw) == base


@pytest.mark.parametrize("state", SQUEUE_STATES)
def test_watch_and_the_collector_agree_on_every_state(state):
    # watch follows a job while is_active; the collector calls exactly those runs "running"
    verdict, _ = state_verdict(job_info({"state": state}, EventLog()), EventLog(), [])
    assert (verdict == "running") == slurm.is_active(state), state
    assert slurm.is_active(f"{state} by 0") == slurm.is_active(state)


def test_a_nodes_state_flag_is_said_in_words(tmp_path):
    # sinfo's %T: "down*" = down and not responding (sinfo(1), NODE STATE CODES)
    (tmp_path / "events.log").write_text(
        "1.0 2026-12-02 12:00:01.000 node_state node=node06 state=down* reason=slurm-ab-test-node-lost\n"
        "1.1 2026-12-02 12:00:01.100 node_state node=node07 state=drain reason=none\n")
    lost = [Finding("node_lost", "slurm-5.out", 3, "srun: error: Node failure on node06", {"node": "node06"})]
    assert node_reasons(lost, read_events(tmp_path / "events.log"), {}) == [
        "node node06 failed (srun: Node failure on node06; Slurm: down (not responding), reason: slurm-ab-test-node-lost)",
        "node node07 was drain in Slurm when the job ended"]
    assert [slurm.node_state_words(s) for s in ("down", "idle~", "mixed-", "*")] == [
        "down", "idle (powered off)", "mixed (planned by the backfill scheduler)", "*"]


def test_a_pending_jobs_reason_in_words_and_in_the_progress_line(tmp_path, monkeypatch):
    """squeue's %r for a pending job (squeue(1) JOB REASON CODES), in words where the user can act;
    the progress line shows it after "queued"."""
    from slurm_ab.job.progress import Tracker

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho PartitionTimeLimit\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    reason = slurm.pending_reason("12")
    assert reason == "PartitionTimeLimit"
    text = slurm.pending_text(reason)
    assert text == "PartitionTimeLimit: its time limit is above the partition's MaxTime: it will not start"
    assert slurm.pending_text("Resources") == "Resources: waiting for free nodes"
    assert slurm.pending_text("SomethingNew") == "SomethingNew"
    run = tmp_path / "run"
    run.mkdir()
    phase = Tracker(run)._phase(f"PENDING ({text})")[0]
    assert phase == f"queued ({text})"
    assert Tracker(run)._phase("PENDING")[0] == "queued"
