"""`slurm-ab clean`: what ended runs may have left on their nodes, and (with --yes) a small job on
those nodes that removes it: the sweep a job runs before its preflight (sbatch_templates/sweep.sh),
on demand. A job's own clean-up step cannot run once Slurm has cancelled it, timed it out or lost a
node; the next job on those nodes sweeps them, this does it without waiting for one."""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..collect.leftovers import Leftovers, leftovers
from ..model import rundir
from ..model.slurm import squeue_state


@dataclass(frozen=True)
class Stale:
    run_dir: Path
    left: Leftovers
    prefix: str                   # pyxis_<container.name>- ("" = no container)
    base: str                     # the cache base (<cache.dir>; "" = none)
    list_command: tuple[str, ...]
    remove_command: tuple[str, ...]
    partition: str
    enroot_dir: str = ""


def stale_runs(results: Path, refs: tuple[str, ...] = ()) -> list[Stale]:
    """Runs whose job has ended (Slurm no longer lists it) and whose clean-up did not confirm."""
    dirs = [rundir.find(r, results) for r in refs] if refs else rundir.all_runs(results)
    out = []
    for d in dirs:
        m = rundir.read_manifest(d)
        if m is None or m.config is None or not m.job_id or squeue_state(m.job_id) is not None:
            continue
        lo = leftovers(d, m.job_id)
        if lo is None or not lo.left:
            continue
        ct, cache = m.config.container, m.config.cache
        out.append(Stale(d, lo, f"pyxis_{ct.name}-" if lo.containers else "",
                         cache.dir.rstrip("/") if lo.cache else "", tuple(ct.list_command or ("enroot", "list")),
                         tuple(ct.remove_command or ("enroot", "remove", "-f")), m.config.cluster.partition,
                         ct.enroot_dir or ""))
    return out


def clean_script(stale: list[Stale], output: Path) -> str:
    """The sweep job of these runs' nodes (one site's commands: the first run's)."""
    from .. import __version__
    from .render import _env

    nodes = sorted({n for s in stale for ns in s.left.nodes.values() for n in ns if n})
    targets = sorted({(s.prefix, s.base) for s in stale})
    first = stale[0]
    sbatch = [f"--partition={first.partition}"] if first.partition else []
    return _env().get_template("clean.sbatch.j2").render(
        version=__version__, nodes=nodes, output=str(output), sbatch=sbatch, targets=targets,
        list_command=first.list_command, remove_command=first.remove_command, enroot_dir=first.enroot_dir)


def run_clean(script: Path, output: Path, echo, wait_s: float = 120) -> bool:
    """Submit the sweep job and wait (bounded) for it; echo what it removed."""
    r = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        echo(f"sbatch refused the clean-up job: {r.stderr.strip()}")
        return False
    jid = r.stdout.strip().split(";")[0]
    echo(f"clean-up job {jid} submitted on those nodes")
    deadline = time.monotonic() + wait_s
    while squeue_state(jid) is not None:
        if time.monotonic() > deadline:
            echo(f"job {jid} has not run within {wait_s:.0f} s (its nodes are busy?): it runs when they are free; "
                 f"its output: {output}")
            return False
        time.sleep(1)
    lines = sorted(set(output.read_text(errors="replace").splitlines())) if output.exists() else []
    for line in lines:
        echo(f"  {line}")
    echo(f"job {jid} done: {sum(x.startswith('removed') for x in lines)} removed, "
         f"{sum(x.startswith('failed') for x in lines)} failed ({output})")
    return not any(x.startswith("failed") for x in lines)


__all__ = ["Stale", "clean_script", "run_clean", "stale_runs"]
