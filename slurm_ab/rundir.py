"""The run directory: its layout, its manifest, and finding a run again by run id or job id.

Created once and never reused or overwritten (its evidence stays intact). submit/render write
job.sbatch and manifest.json; the job script writes the raw files (events.log, logs/, bench.jsonl,
slurm-<JOBID>.out); the collector reads them and writes only summary.*. The layout is described in
docs/design.md; every path to a file of a run comes from `Layout`.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .campaign import Campaign, Launch
from .errors import UsageError
from .experiment import Experiment
from .parse.events import Event, read_events

SUMMARY_FILES = ("summary.json", "summary.csv", "summary.md")


@dataclass(frozen=True)
class Layout:
    """Where each file of one run lives."""

    root: Path

    job_script = property(lambda self: self.root / "job.sbatch")
    manifest = property(lambda self: self.root / "manifest.json")
    events = property(lambda self: self.root / "events.log")
    bench_jsonl = property(lambda self: self.root / "bench.jsonl")        # bench_serving --output-file
    logs = property(lambda self: self.root / "logs")
    client_log = property(lambda self: self.root / "logs" / "client.log")  # bench_serving stdout+stderr
    router_log = property(lambda self: self.root / "logs" / "router.log")
    submitit = property(lambda self: self.root / "submitit")               # submitit's own files
    metrics = property(lambda self: self.root / "metrics")      # /metrics scrapes: <target>-<stamp>.prom
    preflight = property(lambda self: self.root / "preflight")  # preflight/<node>.json per node
    submit_error = property(lambda self: self.root / "submit-error.txt")   # why sbatch refused
    report_html = property(lambda self: self.root / "report.html")         # derived, like summaries
    plots = property(lambda self: self.root / "plots")                     # report.html's PNGs

    def server_log(self, replica: int, rank: int) -> Path:
        """stdout+stderr of one node (node rank `rank`) of replica `replica`."""
        return self.logs / f"server-r{replica}-n{rank}.log"

    def server_logs(self) -> list[Path]:
        return sorted(self.logs.glob("server-r*-n*.log")) if self.logs.is_dir() else []

    def warmup_response(self, replica: int) -> Path:
        return self.logs / f"warmup-r{replica}.json"

    def slurm_out(self, job_id: str | int) -> Path:
        """The batch script's stdout+stderr (#SBATCH --output)."""
        return self.root / f"slurm-{job_id}.out"

    def slurm_outs(self) -> list[Path]:
        return sorted(self.root.glob("slurm-*.out"))

    def summary(self, name: str) -> Path:
        """One of SUMMARY_FILES, the collector's only output."""
        return self.root / name


# ---- manifest.json -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Manifest:
    """manifest.json: what was submitted. Written by submit/render (job_id and collector_job_id once
    sbatch has answered, nodes once the job has run), read by the collector and the CLI."""

    run_id: str | None = None
    experiment: str | None = None
    mode: str | None = None
    mode_description: str | None = None   # e.g. "2 x TP32/PP1/EP4 + DFlash"
    job_id: str | None = None             # None: prepared by `render`, not submitted by slurm-ab
    collector_job_id: str | None = None
    job_name: str | None = None
    run_dir: str | None = None
    components: tuple = ()                # {"het_group": G, "replica": G, "nodes": N} per component
    submitted_at: str | None = None
    submitted_by: str | None = None
    submit_host: str | None = None
    versions: dict = field(default_factory=dict)
    config: Experiment | None = None      # the resolved experiment of the run (of its first mode)
    nodes: dict | None = None             # "het_group_<G>" -> Slurm node list, after the run
    campaign: Campaign | None = None      # a campaign's schedule (root manifest of a campaign)
    launch: Launch | None = None          # the launch a launch directory's manifest describes
    extra: dict = field(default_factory=dict)    # keys this version does not know, kept on rewrite

    @property
    def replicas(self) -> int | None:
        return self.config.replicas if self.config is not None else None

    @property
    def benchmark(self) -> dict:
        """The [benchmark] settings as recorded (unknown ones left out)."""
        if self.config is None:
            return {}
        return {k: v for k, v in asdict(self.config.benchmark).items() if v is not None}

    @property
    def warmup_input_len(self) -> int | None:
        return self.config.warmup.input_len if self.config is not None else None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("extra", "campaign", "launch")}
        d["components"] = [dict(c) for c in self.components]
        d["config"] = self.config.to_dict() if self.config is not None else {}
        if d["nodes"] is None:
            del d["nodes"]
        if self.campaign is not None:
            d["campaign"] = self.campaign.to_dict()
        if self.launch is not None:
            d["campaign_launch"] = self.launch.to_dict()
        return {**d, **{k: v for k, v in self.extra.items() if k not in d}}

    @classmethod
    def from_dict(cls, d: dict) -> Manifest:
        """Read either layout slurm-ab has written: the current one (the resolved experiment under
        "config"), or the flat one of the collector's test fixtures (no "config"; "description",
        "replicas", "benchmark" and "warmup" at the top level)."""
        d = dict(d)
        if "config" not in d:
            d["mode_description"] = d.pop("mode_description", None) or d.pop("description", None)
            d["config"] = {k: d.pop(k) for k in ("replicas", "benchmark", "warmup") if k in d}
        known = {f.name for f in fields(cls)} - {"extra", "launch"} | {"campaign_launch"}
        text = {"run_id", "experiment", "mode", "mode_description", "job_id", "collector_job_id",
                "job_name", "run_dir", "submitted_at", "submitted_by", "submit_host"}
        kw: dict = {k: _text(d.get(k)) for k in text}
        kw["components"] = tuple(dict(c) for c in d.get("components") or () if isinstance(c, dict))
        kw["versions"] = dict(d["versions"]) if isinstance(d.get("versions"), dict) else {}
        cfg = d.get("config")
        kw["config"] = Experiment.from_dict(cfg) if isinstance(cfg, dict) and cfg else None
        kw["nodes"] = dict(d["nodes"]) if isinstance(d.get("nodes"), dict) else None
        kw["campaign"] = _typed(Campaign.from_dict, d.get("campaign"))
        kw["launch"] = _typed(Launch.from_dict, d.get("campaign_launch"))
        kw["extra"] = {k: v for k, v in d.items() if k not in known}
        return cls(**kw)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _typed(reader, value):
    """A typed record from a manifest's table; None when absent or unreadable."""
    if not isinstance(value, dict):
        return None
    try:
        return reader(value)
    except (KeyError, TypeError, ValueError):
        return None


def _text(v) -> str | None:
    return None if v is None or v == "" else str(v)


def read_manifest(run_dir: Path) -> Manifest | None:
    """The run's manifest; None when missing, unreadable or not a JSON object."""
    try:
        data = json.loads(Layout(Path(run_dir)).manifest.read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    return Manifest.from_dict(data) if isinstance(data, dict) else None


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    write_atomic(Layout(Path(run_dir)).manifest, manifest.to_json())


def record_nodes(run_dir: Path, node_lists: dict) -> None:
    """Add the components' node lists to the manifest once the job has run (submit cannot know
    them); written once, never changed afterwards."""
    m = read_manifest(run_dir)
    if m is not None and node_lists and m.nodes is None:
        write_manifest(run_dir, replace(m, nodes={f"het_group_{k}": v for k, v in node_lists.items()}))


# ---- who a run is --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    run_id: str
    job_id: str | None
    mode: str | None


def job_start(run_dir: Path) -> Event | None:
    """The job's own record of itself: the first 'job_start job_id=.. run_id=.. mode=..' line of
    events.log (the only reader of these fields)."""
    return read_events(Layout(Path(run_dir)).events).first.get("job_start")


def identify(run_dir: Path, manifest: Manifest | None = None) -> Identity:
    """Run id, job id and mode: what submit/render recorded in the manifest, else what the job
    recorded in events.log (a plain `sbatch` of a script); the run id is else the directory's
    name. Nothing is guessed from names: a run that recorded no mode has none."""
    run_dir = Path(run_dir)
    m = manifest if manifest is not None else (read_manifest(run_dir) or Manifest())
    start = job_start(run_dir)
    own = start.fields if start else {}
    return Identity(run_id=m.run_id or own.get("run_id") or run_dir.name,
                    job_id=m.job_id or own.get("job_id") or None,
                    mode=m.mode or own.get("mode") or None)


def job_id_of(run_dir: Path) -> str | None:
    """The Slurm job id of a run: from the manifest (submit) or events.log (plain sbatch)."""
    return identify(run_dir).job_id


def submitted(run_dir: Path) -> bool:
    """A job ran (or was submitted) for this directory; `render` alone prepares one without."""
    m = read_manifest(run_dir)
    return Layout(Path(run_dir)).events.exists() or bool(m and m.job_id)


# ---- finding runs --------------------------------------------------------------------------------

def find(ref: str, results: Path) -> Path:
    """A run directory from a path, a run id (directory name) or a Slurm job id."""
    p = Path(ref)
    lay = Layout(p)
    if p.is_dir() and (lay.manifest.exists() or lay.events.exists() or lay.job_script.exists()):
        return p
    if "/" not in ref and (results / ref).is_dir():
        return results / ref
    job = ref.split("+")[0]
    if job.isdigit():
        found = find_run_dirs(results, job)
        if found:
            return found[0]
    raise UsageError(f"no run {ref!r}: not a run directory, a run id under {results}, or the job id of one")


def find_run_dirs(results: str | Path, job_id: str | int) -> list[Path]:
    """Run directories of job_id under results (usually one), sorted by name.

    The job writes slurm-<JOBID>.out into its run directory (#SBATCH --output) and records
    'job_start job_id=<JOBID>' in events.log; submit records the id in manifest.json; a script
    submitted again writes to '<run dir>-job<JOBID>' (see the job script). A directory that
    records the job (name suffix, manifest, events.log) wins over one that only holds its
    slurm-<JOBID>.out: a re-submitted script leaves a one-line pointer in the old run.
    """
    results, job_id = Path(results), str(job_id)
    if not results.is_dir():
        return []
    recorded, output_only = [], []
    for run in sorted(p for p in results.iterdir() if p.is_dir()):
        m = read_manifest(run)
        start = job_start(run)
        if run.name.endswith(f"-job{job_id}") or (m and m.job_id == job_id) or \
                (start is not None and start.fields.get("job_id") == job_id):
            recorded.append(run)
        elif Layout(run).slurm_out(job_id).exists():
            output_only.append(run)
    return recorded or output_only


def all_runs(results: Path) -> list[Path]:
    """Run directories under results/ that a job ran or was submitted for."""
    if not results.is_dir():
        return []
    return sorted(d for d in results.iterdir() if d.is_dir() and submitted(d))


# ---- writing -------------------------------------------------------------------------------------

def create(run_dir: Path) -> Path:
    """Create the run directory; an existing one is never reused (its evidence stays intact)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise UsageError(f"run directory {run_dir} already exists; slurm-ab never reuses one "
                         f"(choose another --run-id or RUN_ID)") from None
    return run_dir


def write_new(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file that must not exist yet (O_EXCL)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def write_atomic(path: Path, content: str | bytes) -> bool:
    """Replace a derived file (manifest, summaries, report, plots) in one step, so readers never
    see half of it; a file whose content would not change is left alone. True when written.
    Mode 0644: teammates on a shared cluster read each other's results (mkstemp makes 0600)."""
    data = content.encode() if isinstance(content, str) else content
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


__all__ = ["Layout", "Manifest", "Identity", "SUMMARY_FILES", "read_manifest", "write_manifest",
           "record_nodes", "job_start", "identify", "job_id_of", "submitted", "find",
           "find_run_dirs", "all_runs", "create", "write_new", "write_atomic"]
