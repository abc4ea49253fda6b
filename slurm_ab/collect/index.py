"""The history's index (issue 34 item 3): every collected run and campaign under a results directory,
in an SQLite file kept off it.

The run directories are the truth; the index is derived from their summary.json (the collector's
own records, read with read_summary) and rebuilt from them at any time: `update` re-reads only the
runs whose summary changed (size and mtime), drops the runs that are gone, and writes nothing under
results/ (which may be read-only). A rebuild writes a new file and renames it into place, so a
reader never sees half an index. SQLite's locking is unsafe on NFS/Lustre: the file lives on a
local disk ([history] index, default $XDG_CACHE_HOME/slurm-ab, one file per results directory),
in SQLite's default rollback journal (WAL needs shared memory a network file system lacks).

A point is one (run, mode, load, prompts), the load as the collector's aggregates group it (a
concurrency, or an open-loop pass's request rate: rows.PassRow's concurrency and rate): its ok
passes' mean and 95 % interval of every metric of ab_stats' table (one run: its one value, no
interval). Its series key: the mode, the configuration fingerprint (the image, every role's flags
and parallelism, the model, the site: the cluster's name and partition) and the workload (dataset,
lengths, the load's label "C=8" or "4 req/s", prompts, client), so a closed-loop pass and open-loop
passes at different rates are never one series.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..ab_stats import METRICS, aggregate
from ..model import rundir
from ..model.experiment import Experiment
from .rows import load_label, pass_row
from .write import read_summary

SCHEMA = 2        # 2: points have the load's rate (an index of another schema is rebuilt)
TABLES = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE runs (dir TEXT PRIMARY KEY, run_id TEXT, job_id TEXT, submitted_at TEXT, verdict TEXT, "
    "passes INTEGER, summary_size INTEGER, summary_mtime_ns INTEGER)",
    "CREATE TABLE configs (fingerprint TEXT PRIMARY KEY, description TEXT)",
    "CREATE TABLE points (dir TEXT, run_id TEXT, submitted_at TEXT, mode TEXT, fingerprint TEXT, workload TEXT, "
    "concurrency INTEGER, rate REAL, prompts INTEGER, metric TEXT, n INTEGER, passes INTEGER, mean REAL, "
    "half_width REAL, PRIMARY KEY (dir, mode, concurrency, rate, prompts, metric))",
)


def default_index(results: Path, setting: str = "") -> Path:
    """Where the index of `results` lives: history.index (a file, or a directory for one file
    per results directory), else $XDG_CACHE_HOME/slurm-ab (~/.cache/slurm-ab)."""
    tag = hashlib.sha1(str(Path(results).resolve()).encode()).hexdigest()[:12]
    if setting:
        p = Path(os.path.expanduser(setting))
        return p / f"history-{tag}.sqlite" if p.is_dir() or setting.endswith("/") else p
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "slurm-ab"
    return base / f"history-{tag}.sqlite"


def fingerprint(exp: Experiment | None, cluster: str | None) -> tuple[str, dict]:
    """(short hash, what it hashes) of a mode's configuration: image, flags, parallelism, model, site."""
    if exp is None:
        desc: dict = {"unknown": True}
    else:
        desc = {"image": exp.container.image, "model": exp.paths.model, "server": list(exp.commands.server),
                "site": {"cluster": cluster, "partition": exp.cluster.partition},
                "roles": {r.name: {"instances": r.instances, "nodes": r.nodes, "tp": r.tp, "pp": r.pp, "ep": r.ep,
                                   "flags": [[k, v] for k, v in exp.role_flags(r.name)],
                                   "env": [[k, v] for k, v in r.env]} for r in exp.mode.roles},
                "server_env": [[k, v] for k, v in exp.server_env]}
    text = json.dumps(desc, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:10], desc


def workload(exp: Experiment | None, spec, concurrency: int | None, prompts: int | None,
             rate: float | None = None) -> str:
    """'speed-bench/throughput_16k 16384->512 C=8 P=40 sglang_0_5_23' ('4 req/s' for C=8: an
    open-loop pass's load, rows.load_label)."""
    b = exp.benchmark if exp is not None else None
    ds = (b.dataset + (f"/{b.dataset_config}" if b.dataset_config else "")) if b else (spec.dataset or "?")
    i = spec.input_len if spec.input_len is not None else (b.input_len if b else "?")
    o = spec.output_len if spec.output_len is not None else (b.output_len if b else "?")
    return f"{ds} {i}->{o} {load_label(concurrency, rate)} P={prompts}" + (f" {exp.client.profile}" if exp and exp.client.profile else "")


@dataclass(frozen=True)
class Update:
    path: Path
    added: int
    refreshed: int
    removed: int
    not_collected: tuple[str, ...]       # runs without summary.json (slurm-ab collect them)


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA journal_mode=DELETE")
    return con


def _schema(index: Path) -> int | None:
    """The schema of an existing index file (None: unreadable): another one is rebuilt."""
    try:
        con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        finally:
            con.close()
        return int(row[0]) if row else None
    except (sqlite3.Error, ValueError):
        return None


def _create(con: sqlite3.Connection, results: Path) -> None:
    for sql in TABLES:
        con.execute(sql)
    con.execute("INSERT INTO meta VALUES ('schema', ?), ('results', ?)", (str(SCHEMA), str(Path(results).resolve())))


def _mode_configs(run_dir: Path) -> dict[str, Experiment | None]:
    """Each mode's resolved experiment (its first launch's manifest; the run's for its mode)."""
    run = rundir.open_run(run_dir)
    out: dict[str, Experiment | None] = {}
    for la in run.campaign.launches:
        if la.mode not in out:
            m = rundir.read_manifest(run.launch_layout(la).root)
            out[la.mode] = m.config if m is not None and m.config is not None else (
                run.manifest.config if run.manifest.mode == la.mode else None)
    return out


def _ingest(con: sqlite3.Connection, run_dir: Path, st: os.stat_result) -> None:
    cs = read_summary(run_dir)
    if cs is None:
        return
    m = rundir.read_manifest(run_dir)
    when = (m.submitted_at if m else None) or ""
    cluster = m.extra.get("cluster") if m else None
    key = str(run_dir.resolve())
    con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, cs.run_id, cs.job_id, when, cs.verdict, len(cs.passes), st.st_size, st.st_mtime_ns))
    configs = _mode_configs(run_dir)
    groups: dict[tuple, list] = {}      # (mode, concurrency, rate, prompts): the aggregates' load, and prompts
    for p in cs.passes:
        r = pass_row(p)
        groups.setdefault((r.mode, r.concurrency, r.rate, r.prompts), []).append((p, r))
    for (mode, conc, rate, prompts), passes in sorted(groups.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][2] is not None, kv[0][2] or 0.0, kv[0][3] or 0)):
        exp = configs.get(mode)
        fp, desc = fingerprint(exp, cluster)
        con.execute("INSERT OR IGNORE INTO configs VALUES (?, ?)", (fp, json.dumps(desc, sort_keys=True, default=str)))
        wl = workload(exp, passes[0][0].spec, conc, prompts, rate)
        rows = [r for p, r in passes if p.verdict == "ok"]
        for metric in METRICS:
            agg = aggregate([r.value(metric.name) for r in rows])
            if agg.n == 0:
                continue
            con.execute("INSERT INTO points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (key, cs.run_id, when, mode, fp, wl, conc, rate, prompts, metric.name, agg.n, len(passes),
                         agg.mean, agg.half_width))


def update(results: Path, index: Path, rebuild: bool = False) -> Update:
    """Bring the index of `results` up to date (rebuild: from nothing, into a new file renamed into
    place). Reads only summary.json and the manifests; writes only `index`."""
    results, index = Path(results), Path(index)
    index.parent.mkdir(parents=True, exist_ok=True)
    fresh = rebuild or not index.exists() or _schema(index) != SCHEMA
    target = index.with_name(index.name + ".new") if fresh else index
    if fresh and target.exists():
        target.unlink()
    con = _connect(target)
    try:
        if fresh:
            _create(con, results)
        known = {d: (s, t) for d, s, t in con.execute("SELECT dir, summary_size, summary_mtime_ns FROM runs")}
        seen, added, refreshed, missing = set(), 0, 0, []
        for run_dir in rundir.all_runs(results):
            summary = rundir.Layout(run_dir).summary("json")
            key = str(run_dir.resolve())
            try:
                st = summary.stat()
            except OSError:
                missing.append(run_dir.name)
                continue
            seen.add(key)
            if known.get(key) == (st.st_size, st.st_mtime_ns):
                continue
            if key in known:
                con.execute("DELETE FROM runs WHERE dir = ?", (key,))
                con.execute("DELETE FROM points WHERE dir = ?", (key,))
                refreshed += 1
            else:
                added += 1
            _ingest(con, run_dir, st)
        gone = [d for d in known if d not in seen]
        for d in gone:
            con.execute("DELETE FROM runs WHERE dir = ?", (d,))
            con.execute("DELETE FROM points WHERE dir = ?", (d,))
        con.commit()
    finally:
        con.close()
    if fresh:
        os.replace(target, index)
    return Update(index, added, refreshed, len(gone), tuple(missing))


def content(index: Path) -> dict:
    """Every row of the index, ordered (what a rebuild must reproduce)."""
    con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    try:
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in ("meta", "runs", "configs", "points")}
    finally:
        con.close()


def points(index: Path) -> list[dict]:
    """Every point of the index as a dict (oldest first)."""
    con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        rows = con.execute("SELECT p.*, c.description FROM points p JOIN configs c USING (fingerprint) "
                           "ORDER BY p.submitted_at, p.run_id, p.mode, p.concurrency, p.rate").fetchall()
        return [dict(r) for r in rows]
    finally:
        con.close()


__all__ = ["Update", "content", "default_index", "fingerprint", "points", "update", "workload"]
