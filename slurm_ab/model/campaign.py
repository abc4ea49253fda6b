"""A campaign: several modes benchmarked in turn inside one allocation, with repeats and a
concurrency sweep. Pure: which server launches run, in which order, and which passes each runs.

Every job is a campaign; a run of one mode is the campaign of one launch and one pass (one mode,
one concurrency, one repeat), laid out and collected like any other.

A campaign runs `launches` server launches per mode, each with `repeats` timed passes per
concurrency. Orders: ``counterbalanced`` (the default for comparisons) runs the modes forward then
backward, A B B A A B B A ..., so a linear drift over the job falls equally on every mode and each
mode has launches to estimate launch-to-launch variance; ``interleaved`` runs A B A B ...;
``blocked`` launches each mode once and runs all its passes there (cheapest, but launch and mode are
confounded: its comparisons are 'within-launch only'). Repeats are numbered per mode across its
launches (launch j of a mode runs repeats (j-1) x repeats + 1 ...), so a pass's key is unique.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

ORDERS = ("counterbalanced", "interleaved", "blocked")
MAX_REPEATS = 100
MAX_LAUNCHES = 50
PROFILE_REPEAT = -1        # Pass.repeat of a dedicated profiled pass (profile.target = "extra")
PROFILE_EXTRA = "extra"
# A block: two launches of every mode in counterbalanced order (A B B A). A campaign is balanced
# after every block, so a sequential campaign looks, and a campaign out of time stops, only there.
LAUNCHES_PER_BLOCK = 2          # per mode
MIN_BLOCKS, MAX_BLOCKS = 2, MAX_LAUNCHES // LAUNCHES_PER_BLOCK
# benchmark.spending: how a sequential campaign spends its 5 % over its looks (ab_stats/sequential.py)
SPENDING_DEFAULT = "power-2"
SPENDING_CHOICES = ("auto (power-1 with a prior, else power-2), obrien-fleming, or power-R with 1 <= R <= 5 "
                    "(alpha x t^R; e.g. power-2)")


def resolve_spending(name: str, prior: bool) -> str:
    """benchmark.spending "auto": power-1 for a campaign with a prior (--prior-from), power-2
    without: calibrations 5 and 6 (docs/statistics.md) find power-1 the cheaper with a prior at
    A/A better/worse 0.1-6.1 %, power-2 the cheaper without one."""
    if name == "auto":
        return "power-1" if prior else SPENDING_DEFAULT
    return name


def spending_power(name) -> float | None:
    """R of 'power-R' (1 <= R <= 5), else None."""
    if not isinstance(name, str) or not name.startswith("power-"):
        return None
    try:
        rho = float(name[len("power-"):])
    except ValueError:
        return None
    return rho if 1.0 <= rho <= 5.0 else None


def valid_spending(name) -> bool:
    return name in ("auto", "obrien-fleming") or spending_power(name) is not None


@dataclass(frozen=True)
class Pass:
    """One timed benchmark: `prompts` requests through the router, at most `concurrency` in flight
    (closed loop), or sent at `rate` requests per second (open loop: Poisson arrivals, bench_serving's
    --request-rate; its concurrency is its prompts, a cap that never binds)."""

    launch: int            # 1-based index of the server launch it runs in
    mode: str
    concurrency: int
    repeat: int            # 1..repeats; 0 = the discarded burn-in pass of its launch; -1 = a
    #                        dedicated profiled pass after the timed ones (PROFILE_REPEAT)
    prompts: int
    rate: float | None = None   # requests per second offered (None: closed loop, --request-rate inf)
    probe: bool = False         # a capacity search's probe: its rate is decided in the job
    profile: bool = False       # profiled (traces of every GPU rank): left out of every statistic

    @property
    def burn_in(self) -> bool:
        return self.repeat == 0

    @property
    def discarded(self) -> bool:
        """Not a timed pass of the statistics: a burn-in or a profiled pass."""
        return self.burn_in or self.profile

    @property
    def key(self) -> str:
        """Names the pass's files and events: bench-<key>.jsonl, logs/client-<key>.log
        (c<C>-r<k>; an open-loop pass q<RATE>-r<k>; burnin / profile in place of r<k>)."""
        if self.probe:
            return f"{_KEY_PROBE}{self.repeat}"
        load = f"{_KEY_CLOSED}{self.concurrency}" if self.rate is None else f"{_KEY_OPEN}{rate_text(self.rate)}"
        tag = _KEY_BURNIN if self.burn_in else _KEY_PROFILE if self.repeat == PROFILE_REPEAT else f"{_KEY_REPEAT}{self.repeat}"
        return f"{load}-{tag}"

    @property
    def load(self) -> str:
        """How users read its load: "C=8", "4 req/s", "probe 2 (rate decided by the search)"."""
        if self.probe:
            return f"probe {self.repeat}" + (f" at {rate_text(self.rate)} req/s" if self.rate else "")
        return f"C={self.concurrency}" if self.rate is None else f"{rate_text(self.rate)} req/s"

    @property
    def spec(self) -> str:
        """How the job script lists it: CONCURRENCY:REPEAT:PROMPTS[:RATE][:profile]."""
        rate = "search" if self.probe else (rate_text(self.rate) if self.rate else "")
        return (f"{self.concurrency}:{self.repeat}:{self.prompts}" + (f":{rate}" if rate else "")
                + (":profile" if self.profile else ""))

    def to_dict(self) -> dict:
        return {"launch": self.launch, "mode": self.mode, "concurrency": self.concurrency,
                "repeat": self.repeat, "prompts": self.prompts, "key": self.key,
                **({"rate": self.rate} if self.rate is not None else {}), **({"probe": True} if self.probe else {}),
                **({"profile": True} if self.profile else {})}


def rate_text(rate: float) -> str:
    """A rate as file names and the job script write it: 4, 2.5, 0.25 (no exponent, no sign)."""
    return f"{rate:.6f}".rstrip("0").rstrip(".")


# The parts Pass.key is made of, and PASS_KEY, the pattern of every key it makes (profile.target
# is checked against it: telemetry_checks): <load>-<tag> (load c<C> or q<rate_text>; tag r<k>,
# burnin or profile), or a capacity search's probe<k>.
_KEY_CLOSED, _KEY_OPEN, _KEY_REPEAT, _KEY_BURNIN, _KEY_PROFILE, _KEY_PROBE = "c", "q", "r", "burnin", "profile", "probe"
_RATE_TEXT = r"\d+(?:\.\d+)?"              # what rate_text writes
PASS_KEY = re.compile(
    rf"(?:{_KEY_CLOSED}\d+|{_KEY_OPEN}{_RATE_TEXT})-(?:{_KEY_REPEAT}\d+|{_KEY_BURNIN}|{_KEY_PROFILE})|{_KEY_PROBE}\d+")


@dataclass(frozen=True)
class Launch:
    """Servers and router started once with one mode's flags, then its passes, then teardown."""

    index: int             # 1-based
    mode: str
    passes: tuple[Pass, ...]

    def to_dict(self) -> dict:
        return {"index": self.index, "mode": self.mode, "passes": [p.to_dict() for p in self.passes]}

    @classmethod
    def from_dict(cls, d: dict) -> "Launch":
        return cls(int(d["index"]), str(d["mode"]), tuple(
            Pass(int(p["launch"]), str(p["mode"]), int(p["concurrency"]), int(p["repeat"]),
                 int(p["prompts"]), float(p["rate"]) if p.get("rate") is not None else None, bool(p.get("probe")),
                 bool(p.get("profile", False)))
            for p in d.get("passes", ())))


@dataclass(frozen=True)
class Prior:
    """A pilot's launch-mean variance for a sequential campaign's looks (--prior-from): pooled
    with each look's own (ab_stats/looks.py), so the first look can decide."""

    variance: float                 # log scale, of a launch's mean at this campaign's passes per launch
    df: int                         # its degrees of freedom (the pilot's launch level)
    source: str = ""                # where it was measured (run id, passes per launch)

    def to_dict(self) -> dict:
        return {"variance": self.variance, "df": self.df, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "Prior":
        return cls(float(d["variance"]), int(d["df"]), str(d.get("source", "")))


@dataclass(frozen=True)
class Campaign:
    modes: tuple[str, ...]
    repeats: int
    concurrencies: tuple[int, ...]
    order: str
    burn_in: bool
    launches: tuple[Launch, ...] = field(default=())
    launches_per_mode: int = 1
    primary_metric: str = "output_tps"      # benchmark.primary_metric: the headline verdict
    margin_pct: float = 0.0                 # equivalence margin (benchmark.margin_pct, --margin)
    sequential: bool = False                # a look after every block, stop when the answer is clear
    spending: str = SPENDING_DEFAULT        # benchmark.spending: its alpha-spending function
    rates: tuple[float, ...] = ()           # open-loop passes' request rates (--request-rate)
    capacity: dict | None = None            # a capacity search's spec (ab_stats.capacity): slo_ms,
                                            # attainment, lo, hi, probes
    prior: Prior | None = None              # a sequential campaign's prior variance (--prior-from)

    @property
    def blocks(self) -> tuple[tuple[int, ...], ...]:
        """The launch indices of each complete block (2 x modes consecutive launches, every mode
        twice); launches after the last complete block belong to none."""
        size = LAUNCHES_PER_BLOCK * len(self.modes)
        idx = [x.index for x in self.launches]
        return tuple(tuple(idx[i:i + size]) for i in range(0, len(idx) - size + 1, size))

    @property
    def passes(self) -> tuple[Pass, ...]:
        """Every timed pass (burn-ins and profiled passes left out), in the order they run."""
        return tuple(p for launch in self.launches for p in launch.passes if not p.discarded)

    @property
    def profiled(self) -> tuple[Pass, ...]:
        """The profiled passes (profile.target), in the order they run."""
        return tuple(p for launch in self.launches for p in launch.passes if p.profile)

    @property
    def variance_levels(self) -> tuple[str, ...]:
        """What a comparison's intervals hold: launch and pass variance when every mode has two or
        more launches, else pass variance only (launch and mode confounded)."""
        counts = [sum(1 for x in self.launches if x.mode == m) for m in self.modes]
        return ("launch", "pass") if counts and min(counts) >= 2 else ("pass",)

    @property
    def variance(self) -> str:
        """What the intervals of a comparison include (said with every comparison)."""
        if self.variance_levels == ("launch", "pass"):
            least = min(sum(1 for x in self.launches if x.mode == m) for m in self.modes)
            return (f"across launches: every mode ran in at least {least} server launches ({self.order} "
                    "order); launch means are the units, so the intervals include launch-to-launch variance")
        return ("within one launch only: all repeats of a mode ran in the same server launch "
                f"({self.order} order); launch and mode are confounded, so verdicts are 'within-launch "
                "only' (use --launches 2 or more, counterbalanced order)")

    def to_dict(self) -> dict:
        return {"modes": list(self.modes), "repeats": self.repeats,
                "concurrencies": list(self.concurrencies), "order": self.order,
                "burn_in": self.burn_in, "launches_per_mode": self.launches_per_mode,
                "primary_metric": self.primary_metric, "margin_pct": self.margin_pct,
                "sequential": self.sequential, "spending": self.spending,
                "launches": [x.to_dict() for x in self.launches],
                **({"rates": list(self.rates)} if self.rates else {}),
                **({"capacity": self.capacity} if self.capacity else {}),
                **({"prior": self.prior.to_dict()} if self.prior else {})}

    @classmethod
    def from_dict(cls, d: dict) -> "Campaign":
        launches = tuple(Launch.from_dict(x) for x in d.get("launches", ()))
        per_mode = max((sum(1 for x in launches if x.mode == m) for m in d["modes"]), default=1)
        return cls(tuple(d["modes"]), int(d["repeats"]), tuple(int(c) for c in d["concurrencies"]),
                   str(d["order"]), bool(d.get("burn_in", False)), launches,
                   int(d.get("launches_per_mode", per_mode)), str(d.get("primary_metric", "output_tps")),
                   float(d.get("margin_pct") or 0.0), bool(d.get("sequential", False)),
                   str(d.get("spending") or SPENDING_DEFAULT), tuple(float(r) for r in d.get("rates", ())),
                   d.get("capacity") or None, Prior.from_dict(d["prior"]) if d.get("prior") else None)


def time_blocks(campaign: Campaign) -> tuple[tuple[int, ...], ...]:
    """The units a campaign that runs out of time stops between (the job starts one only when it
    can finish): its complete blocks, then the launches after the last one as one more unit (every
    mode at most once more), or the whole campaign when it has no complete block."""
    blocks = campaign.blocks
    done = {i for b in blocks for i in b}
    rest = tuple(x.index for x in campaign.launches if x.index not in done)
    return blocks + ((rest,) if rest else ())


def prompts_for(concurrency: int, num_prompts: int, prompts_per_concurrency: int) -> int:
    """Requests of one pass: the experiment's num_prompts, or prompts_per_concurrency x C when
    that is set (> 0) so every concurrency of a sweep runs the same number of 'rounds'."""
    return prompts_per_concurrency * concurrency if prompts_per_concurrency > 0 else num_prompts


def launch_order(modes: tuple[str, ...], launches: int, order: str) -> list[str]:
    """The mode of every launch, in the order they run.

    counterbalanced: forward, backward, forward ... (A B B A A B ...): over each pair of rounds
    every mode sits at the same mean position, so a linear drift cancels in the comparison;
    interleaved: forward every round; blocked: each mode's launches back to back."""
    if order == "blocked":
        return [m for m in modes for _ in range(launches)]
    rounds = [list(modes) if order == "interleaved" or r % 2 == 0 else list(reversed(modes))
              for r in range(launches)]
    return [m for rnd in rounds for m in rnd]


def schedule(modes: tuple[str, ...], repeats: int, concurrencies: tuple[int, ...], order: str,
             burn_in: bool, num_prompts: int, prompts_per_concurrency: int = 0, launches: int = 1,
             primary_metric: str = "output_tps", margin_pct: float = 0.0, sequential: bool = False,
             spending: str = SPENDING_DEFAULT, rates: tuple[float, ...] = (), profile: str = "") -> Campaign:
    """The launches and passes of a campaign (arguments already validated): `launches` server
    launches per mode, `repeats` timed passes per concurrency in each, then per request rate (open
    loop: num_prompts each, sent at that rate; the prompts are their cap on concurrency)."""
    out: list[Launch] = []
    seen: dict[str, int] = {}
    for mode in launch_order(tuple(modes), launches, order):
        index = len(out) + 1
        j = seen.get(mode, 0)
        seen[mode] = j + 1
        passes = []
        if burn_in and concurrencies:
            c0 = concurrencies[0]
            passes.append(Pass(index, mode, c0, 0, prompts_for(c0, num_prompts, prompts_per_concurrency)))
        elif burn_in and rates:
            passes.append(Pass(index, mode, num_prompts, 0, num_prompts, rates[0]))
        for c in concurrencies:
            for r in range(j * repeats + 1, (j + 1) * repeats + 1):
                passes.append(Pass(index, mode, c, r, prompts_for(c, num_prompts, prompts_per_concurrency)))
        for q in rates:
            for r in range(j * repeats + 1, (j + 1) * repeats + 1):
                passes.append(Pass(index, mode, num_prompts, r, num_prompts, q))
        out.append(Launch(index, mode, tuple(passes)))
    if concurrencies:       # "extra": at the first concurrency, else (open loop only) the first rate
        out = with_profile(out, profile, concurrencies[0], prompts_for(concurrencies[0], num_prompts,
                                                                      prompts_per_concurrency))
    elif rates:
        out = with_profile(out, profile, num_prompts, num_prompts, rates[0])
    return Campaign(tuple(modes), repeats, tuple(concurrencies), order, burn_in, tuple(out), launches,
                    primary_metric, margin_pct, sequential, spending, tuple(rates))


def capacity_schedule(modes: tuple[str, ...], prompts: int, spec: dict, primary_metric: str = "output_tps") -> Campaign:
    """A capacity search: one launch per mode, each running spec["probes"] probes of `prompts`
    requests whose rates the job decides (ab_stats.capacity)."""
    launches = tuple(Launch(i + 1, m, tuple(Pass(i + 1, m, prompts, k, prompts, None, True)
                                            for k in range(1, int(spec["probes"]) + 1)))
                     for i, m in enumerate(modes))
    return Campaign(tuple(modes), int(spec["probes"]), (), "blocked", False, launches, 1, primary_metric,
                    capacity=spec)


def parse_rates(text: str) -> tuple[float, ...]:
    """'1,2.5,4' -> (1.0, 2.5, 4.0) requests per second; raises ValueError naming the bad item."""
    out: list[float] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        try:
            q = float(item)
        except ValueError:
            raise ValueError(f"{item!r} is not a request rate (requests per second > 0)") from None
        if not (q > 0 and q < float("inf")) or q < 1e-3:
            raise ValueError(f"{item!r} is not a request rate (requests per second, 0.001 or more)")
        if q not in out:
            out.append(q)
    if not out:
        raise ValueError("no request rate given")
    return tuple(out)


def with_profile(launches: list[Launch], target: str, concurrency: int, prompts: int,
                 rate: float | None = None) -> list[Launch]:
    """profile.target applied: "extra" adds a profiled pass after the timed ones of each mode's
    first launch (at the first concurrency, or at `rate`: an open-loop campaign's first); a pass
    key profiles that pass of every mode that has it; "" changes nothing."""
    if not target:
        return launches
    out, seen = [], set()
    for la in launches:
        passes = list(la.passes)
        if target == PROFILE_EXTRA and la.mode not in seen:
            passes.append(Pass(la.index, la.mode, concurrency, PROFILE_REPEAT, prompts, rate, profile=True))
        elif target != PROFILE_EXTRA:
            passes = [replace(p, profile=True) if p.key == target else p for p in passes]
        seen.add(la.mode)
        out.append(Launch(la.index, la.mode, tuple(passes)))
    return out


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
