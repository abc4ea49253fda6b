"""Which GPU ranks live on which node, and the ``[... PPk TPt EPe]`` log prefix of each.

SGLang numbers global ranks ``pp_rank * tp_size + tp_rank`` and fills nodes in order, so with
TP4 PP8 on 4 x 8 GPUs node r hosts stages 2r and 2r+1. Scheduler statistics ("Prefill batch" /
"Decode batch") are printed by the TP0 scheduler of each PP stage (sglang.md §1: with pp > 1
every stage's TP0 prints with its ``PPk`` prefix), so they appear on the node(s) hosting those
TP0s; with pp == 1 only node 0 prints them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cli_args import ServerArgs


@dataclass(frozen=True)
class Rank:
    pp_rank: int
    tp_rank: int


@dataclass(frozen=True)
class Topology:
    tp: int
    pp: int
    ep: int
    dp: int
    dp_attention: bool
    nnodes: int
    gpus_per_node: int

    @classmethod
    def from_args(cls, a: ServerArgs, gpus_per_node: int) -> "Topology":
        return cls(a.tp_size, a.pp_size, a.ep_size, a.dp_size, a.enable_dp_attention, a.nnodes, gpus_per_node)

    def node_of(self, pp_rank: int, tp_rank: int) -> int:
        return (pp_rank * self.tp + tp_rank) // self.gpus_per_node

    def ranks_on(self, node: int) -> list[Rank]:
        first = node * self.gpus_per_node
        world = self.tp * self.pp
        return [Rank(g // self.tp, g % self.tp) for g in range(first, min(world, first + self.gpus_per_node))]

    def stats_stages(self, node: int) -> list[int]:
        """PP stages whose TP0 scheduler runs on `node` (they print the batch statistics)."""
        return [k for k in range(self.pp) if self.node_of(k, 0) == node]

    def metric_groups(self, node: int) -> "MetricGroups":
        """The schedulers on `node` that set SGLang's gauges (is_stats_logging_rank: attn_tp_rank
        0, one per DP rank with DP attention, per PP stage) and every local rank (each scheduler
        pre-creates its time-accounting counters: SchedulerMetricsCollector.__init__)."""
        ranks = tuple((r.pp_rank, r.tp_rank) for r in self.ranks_on(node))
        if not (self.dp_attention and self.dp > 1):
            return MetricGroups(tuple(self.stats_stages(node)), None, 1, 1, ranks)
        attn = max(1, self.tp // self.dp)
        leaders = [(k, d) for k in range(self.pp) for d in range(self.dp) if self.node_of(k, d * attn) == node]
        return MetricGroups(tuple(sorted({k for k, _ in leaders})), tuple(sorted({d for _, d in leaders})),
                            self.dp, attn, ranks)

    def prefix(self, r: Rank) -> str:
        """The rank suffix of SGLang's scheduler log prefix, e.g. ``" PP1 TP0 EP0"``."""
        s = ""
        if self.dp > 1:
            dp_rank = r.tp_rank // max(1, self.tp // self.dp) if self.dp_attention else 0
            s += f" DP{dp_rank}"
        if self.pp > 1:
            s += f" PP{r.pp_rank}"
        if self.tp > 1:
            s += f" TP{r.tp_rank}"
        if self.ep > 1:
            s += f" EP{r.tp_rank // max(1, self.tp // self.ep)}"
        return s


@dataclass(frozen=True)
class MetricGroups:
    """Whose scheduler series a node's /metrics holds (metrics.render's arguments)."""
    stages: tuple
    dps: tuple | None
    dp_size: int
    attn_tp: int
    ranks: tuple = ()              # (pp_rank, tp_rank) of every scheduler on the node

    def kwargs(self) -> dict:
        return {"dps": list(self.dps) if self.dps else None, "dp_size": self.dp_size,
                "attn_tp": self.attn_tp, "counter_ranks": list(self.ranks) or None}
