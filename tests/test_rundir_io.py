"""The run directory's file handling that every stage shares: which directories under results/
are runs, and the atomic write of a derived file (tests of issue 36's mutation audit)."""
from __future__ import annotations

import json
import stat

from slurm_ab.model.rundir import Layout, all_runs, write_atomic


def test_only_directories_a_job_ran_or_was_submitted_for_are_runs(tmp_path):
    ran, queued, rendered, empty = (tmp_path / n for n in ("ran", "queued", "rendered", "empty"))
    for d in (ran, queued, rendered, empty):
        d.mkdir()
    Layout(ran).events.write_text("1 2026-09-02 12:00:00.000 job_start\n")
    Layout(queued).manifest.write_text(json.dumps({"run_id": "queued", "job_id": "4242"}))
    Layout(rendered).manifest.write_text(json.dumps({"run_id": "rendered"}))    # `render` alone
    (tmp_path / "notes.txt").write_text("not a run\n")
    assert all_runs(tmp_path) == [queued, ran]
    assert all_runs(tmp_path / "missing") == []


def test_write_atomic_says_whether_it_wrote_and_leaves_an_unchanged_file_alone(tmp_path):
    p = tmp_path / "summary.json"
    assert write_atomic(p, "{}\n") is True and p.read_text() == "{}\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    before = p.stat()
    assert write_atomic(p, b"{}\n") is False
    assert (p.stat().st_ino, p.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert write_atomic(p, '{"a": 1}\n') is True and p.read_text() == '{"a": 1}\n'
    assert [x.name for x in tmp_path.iterdir()] == ["summary.json"]          # no temporary left
