"""A campaign: several modes benchmarked in turn inside one allocation, with repeats and a
concurrency sweep. Pure: which server launches run, in which order, and which passes each runs.

A single run is the campaign of one mode, one concurrency, one repeat (``Campaign.single``):
its files keep today's names (bench.jsonl, logs/client.log) so nothing about it changes.

Orders: ``blocked`` launches each mode once and runs all its passes (cheap: one model load per
mode; the intervals then hold the pass-to-pass variance of one launch only); ``interleaved``
relaunches per repeat, A B A B ... (each repeat of a mode is its own launch: the intervals
include launch-to-launch variance).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ORDERS = ("blocked", "interleaved")
MAX_REPEATS = 100


@dataclass(frozen=True)
class Pass:
    """One timed benchmark: `prompts` requests at `concurrency` through the router."""

    launch: int            # 1-based index of the server launch it runs in
    mode: str
    concurrency: int
    repeat: int            # 1..repeats; 0 = the discarded burn-in pass of its launch
    prompts: int

    @property
    def burn_in(self) -> bool:
        return self.repeat == 0

    @property
    def key(self) -> str:
        """Names the pass's files and events: bench-<key>.jsonl, logs/client-<key>.log."""
        return f"c{self.concurrency}-{'burnin' if self.burn_in else f'r{self.repeat}'}"

    @property
    def spec(self) -> str:
        """How the job script lists it: CONCURRENCY:REPEAT:PROMPTS."""
        return f"{self.concurrency}:{self.repeat}:{self.prompts}"

    def to_dict(self) -> dict:
        return {"launch": self.launch, "mode": self.mode, "concurrency": self.concurrency,
                "repeat": self.repeat, "prompts": self.prompts, "key": self.key}


@dataclass(frozen=True)
class Launch:
    """Servers and router started once with one mode's flags, then its passes, then teardown."""

    index: int             # 1-based
    mode: str
    passes: tuple[Pass, ...]

    @property
    def dirname(self) -> str:
        """Its sub-directory of the campaign's run directory (logs, events, bench files)."""
        return f"launch{self.index}-{self.mode}"

    def to_dict(self) -> dict:
        return {"index": self.index, "mode": self.mode, "dir": self.dirname,
                "passes": [p.to_dict() for p in self.passes]}


@dataclass(frozen=True)
class Campaign:
    modes: tuple[str, ...]
    repeats: int
    concurrencies: tuple[int, ...]
    order: str
    burn_in: bool
    launches: tuple[Launch, ...] = field(default=())

    @property
    def single(self) -> bool:
        """Today's single run: one mode, one concurrency, one timed pass, no burn-in."""
        return (len(self.modes) == 1 and self.repeats == 1 and len(self.concurrencies) == 1
                and not self.burn_in)

    @property
    def passes(self) -> tuple[Pass, ...]:
        """Every timed pass (burn-ins left out), in the order they run."""
        return tuple(p for launch in self.launches for p in launch.passes if not p.burn_in)

    @property
    def variance(self) -> str:
        """What the intervals of a comparison include (said with every comparison)."""
        if self.order == "interleaved" and self.repeats > 1:
            return ("across launches: every repeat of a mode ran in its own server launch "
                    "(interleaved order), so the intervals include launch-to-launch variance")
        return ("within one launch only: all repeats of a mode ran in the same server launch "
                "(blocked order); launch-to-launch and day-to-day variance are not included, "
                "so the intervals can be too narrow (use --order interleaved to include them)")

    def to_dict(self) -> dict:
        return {"modes": list(self.modes), "repeats": self.repeats,
                "concurrencies": list(self.concurrencies), "order": self.order,
                "burn_in": self.burn_in, "launches": [x.to_dict() for x in self.launches]}

    @classmethod
    def from_dict(cls, d: dict) -> "Campaign":
        launches = tuple(
            Launch(int(x["index"]), str(x["mode"]), tuple(
                Pass(int(p["launch"]), str(p["mode"]), int(p["concurrency"]), int(p["repeat"]),
                     int(p["prompts"])) for p in x.get("passes", ())))
            for x in d.get("launches", ()))
        return cls(tuple(d["modes"]), int(d["repeats"]), tuple(int(c) for c in d["concurrencies"]),
                   str(d["order"]), bool(d.get("burn_in", False)), launches)


def prompts_for(concurrency: int, num_prompts: int, prompts_per_concurrency: int) -> int:
    """Requests of one pass: the experiment's num_prompts, or prompts_per_concurrency x C when
    that is set (> 0) so every concurrency of a sweep runs the same number of 'rounds'."""
    return prompts_per_concurrency * concurrency if prompts_per_concurrency > 0 else num_prompts


def schedule(modes: tuple[str, ...], repeats: int, concurrencies: tuple[int, ...], order: str,
             burn_in: bool, num_prompts: int, prompts_per_concurrency: int = 0) -> Campaign:
    """The launches and passes of a campaign (arguments already validated)."""
    launches: list[Launch] = []

    def launch(mode: str, reps: list[int]) -> None:
        index = len(launches) + 1
        passes = []
        if burn_in:
            c0 = concurrencies[0]
            passes.append(Pass(index, mode, c0, 0, prompts_for(c0, num_prompts, prompts_per_concurrency)))
        for c in concurrencies:
            for r in reps:
                passes.append(Pass(index, mode, c, r, prompts_for(c, num_prompts, prompts_per_concurrency)))
        launches.append(Launch(index, mode, tuple(passes)))

    if order == "interleaved":
        for r in range(1, repeats + 1):
            for m in modes:
                launch(m, [r])
    else:
        for m in modes:
            launch(m, list(range(1, repeats + 1)))
    return Campaign(tuple(modes), repeats, tuple(concurrencies), order, burn_in, tuple(launches))


def parse_concurrencies(text: str) -> tuple[int, ...]:
    """'1,8,16' -> (1, 8, 16); raises ValueError naming the bad item."""
    out = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"{item!r} is not a concurrency (an integer >= 1)")
        if int(item) not in out:
            out.append(int(item))
    if not out:
        raise ValueError("no concurrency given")
    return tuple(out)
