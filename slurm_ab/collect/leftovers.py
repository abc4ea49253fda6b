"""What an ended job may have left on its nodes, and where: its named containers and per-job
cache directory, which its own clean-up step removes at its end (events.log `cleanup ... ok=1`).
Slurm refuses that step once the job is cancelled, timed out or lost a node, so a job that ended
that way without `cleanup ok=1` may have left them: the verdict says which and where, and that the
next job's preflight on those nodes (cluster.sweep_stale) or `slurm-ab clean` removes them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..model.rundir import RELATIVE, Layout, read_manifest
from ..parse.events import read_events


@dataclass(frozen=True)
class Leftovers:
    """The clean-up a job owed its nodes and whether it ran."""

    job_id: str
    containers: tuple[str, ...]        # pyxis names, one per het group
    cache: str                         # the per-job cache directory ("" = none)
    nodes: dict                        # het group -> its nodes (events.log hosts)
    cleaned: bool | None               # cleanup ok=1 / ok=0 / None: no cleanup event

    @property
    def owed(self) -> bool:
        return bool(self.containers or self.cache)

    @property
    def left(self) -> bool:
        return self.owed and not self.cleaned

    def text(self) -> str:
        where = ", ".join(n for g in sorted(self.nodes) for n in self.nodes[g]) or "the job's nodes"
        what = [f"container {c} on {', '.join(self.nodes.get(g, [])) or where}"
                for g, c in enumerate(self.containers)]
        if self.cache:
            what.append(f"cache directory {self.cache} on {where}")
        if self.cleaned:
            return f"nothing left on the nodes: the job's clean-up removed {'; '.join(what)}"
        why = (f"its clean-up step failed ({RELATIVE.cleanup_log('*', '*')})" if self.cleaned is False else
               "its clean-up never ran (Slurm refuses new steps once a job is cancelled, timed out or lost a node)")
        return (f"may be left on the nodes: {'; '.join(what)}: {why}; the next job's preflight on those nodes "
                f"removes them (cluster.sweep_stale), or `slurm-ab clean`")


def leftovers(root: Path, job_id: str | None) -> Leftovers | None:
    """What the run's job owed its nodes ( None: nothing, or not known: no job id, no manifest)."""
    m = read_manifest(root)
    if m is None or m.config is None or not job_id:
        return None
    ct, cache = m.config.container, m.config.cache
    events = read_events(Layout(root).events)
    nodes = {int(e.fields["replica"]): e.fields.get("nodes", "").split(",")
             for e in events.named("hosts") if e.fields.get("replica", "").isdigit()}
    groups = len(m.components) or len(nodes) or 1
    containers = tuple(f"pyxis_{ct.name}-{job_id}-{g}" for g in range(groups)) \
        if ct.image and ct.name and ct.scope == "global" and ct.remove_command else ()
    cache_dir = f"{cache.dir.rstrip('/')}/slurm-ab-{job_id}" if cache.dir and cache.per_job else ""
    done = [e for e in events.named("cleanup")]
    cleaned = (done[-1].fields.get("ok") == "1") if done else None
    lo = Leftovers(str(job_id), containers, cache_dir, nodes, cleaned)
    return lo if lo.owed else None


__all__ = ["Leftovers", "leftovers"]
