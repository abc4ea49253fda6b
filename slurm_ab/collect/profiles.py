"""A profiled pass's traces (issue 34 item 2): which role instance's ranks wrote theirs, what each
head answered to /start_profile, and what is missing. The pass itself is collected like any other
and left out of every statistic (collect.campaign)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..model.campaign import Launch, Pass
from ..model.experiment import instance_name
from ..model.rundir import Layout, Manifest
from ..parse.events import read_events


@dataclass(frozen=True)
class ProfileTraces:
    """One role instance's traces of a profiled pass."""

    group: int                       # het group
    component: str                   # "replica 0", "prefill 0"
    role: str
    start_http: str | None           # its head's answer to /start_profile
    expected: int | None             # one per GPU rank (x2 with profile_by_stage)
    traces: tuple[str, ...] = ()     # run-directory relative


@dataclass(frozen=True)
class ProfileRecord:
    launch: int
    mode: str
    key: str
    verdict: str                     # the pass's own (its numbers are in no statistic)
    dir: str                         # run-directory relative
    components: tuple[ProfileTraces, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def traces(self) -> int:
        return sum(len(c.traces) for c in self.components)


def profile_record(root: Path, lay: Layout, launch: Launch, p: Pass, summary, manifest: Manifest) -> ProfileRecord:
    exp = manifest.config
    where = lay.profile_dir(p.key)
    files = sorted(x for x in where.glob("*") if x.is_file())
    http = {e.get_int("replica"): e.fields.get("http") for e in read_events(lay.events).named("profile_start")
            if e.fields.get("pass") == p.key}
    comps, problems = [], []
    per_rank = 2 if exp is not None and exp.profile.profile_by_stage else 1
    for c in (exp.components if exp is not None else ()):
        mine = tuple(Layout(root).rel(x) for x in files if x.name.startswith(f"r{c.group}-") and ".trace." in x.name)
        expected = c.nodes * exp.cluster.gpus_per_node * per_rank if exp.cluster.gpus_per_node else None
        name = instance_name(c.role, c.instance)
        comps.append(ProfileTraces(c.group, name, c.role, http.get(c.group), expected, mine))
        if http.get(c.group) != "200":
            problems.append(f"{name}: /start_profile answered HTTP {http.get(c.group) or 'nothing'} "
                            f"[{Layout(root).rel(lay.profile_answer(p.key, 'start', c.group))}]")
        elif expected is not None and len(mine) < expected:
            problems.append(f"{name}: {len(mine)} of {expected} traces (one per GPU rank"
                            + (" and stage" if per_rank > 1 else "") + ")")
    return ProfileRecord(launch.index, launch.mode, p.key, summary.verdict, Layout(root).rel(where), tuple(comps),
                         tuple(problems))


__all__ = ["ProfileRecord", "ProfileTraces", "profile_record"]
