"""NCCL's init lines in a server log: which network the node's ranks chose, and why.

With NCCL_DEBUG=INFO each rank logs, as its communicators start, the IB transport's device line
("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>", or "NET/IB : No device
found." when no HCA port is usable: src/transport/net_ib.cc, net_ib/init.cc in later versions), the
socket transport's when it is the one used ("NET/Socket : Using [0]eth0:10.0.0.1<0>",
src/transport/net_socket.cc), and the network picked ("Using network IB|Socket", src/init.cc). Every
line starts "<host>:<pid>:<tid> [<cuda dev>] NCCL INFO " (src/debug.cc). The same texts in NCCL
2.18 through 2.29; "IB" covers InfiniBand and RoCE.

Streams the file in blocks and looks only at lines holding one of the anchors (C-speed find).
"""
from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from .text import BLOCK, decode, iter_blocks

_USING = b"NCCL INFO Using network "
# Lines that say why IB was not used (the first one found is the cause shown).
_CAUSES = (b"NET/IB : No device found", b"libibverbs", b"NCCL_IB_DISABLE set by environment")


@dataclass(frozen=True)
class NcclNetwork:
    networks: tuple[str, ...]          # distinct networks, in the order first seen
    line: int                          # 1-based line of the first "Using network" line
    excerpt: str
    cause: str | None = None           # the first line saying why IB was not used, if any
    cause_line: int | None = None

    def other_than(self, expected: str, names: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The networks outside the expected family: NAMES are its patterns ([nccl_networks]; a run
        recorded before them: the family's own name only)."""
        return tuple(n for n in self.networks if not in_family(n, names or (expected,)))


def in_family(name: str, patterns) -> bool:
    """NAME is one of a family's names ([nccl_networks]: shell-style patterns, * for any text)."""
    return any(fnmatchcase(name, p) for p in patterns)


def _excerpt(text: str, width: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def nccl_network(path: str | Path, block: int = BLOCK) -> NcclNetwork | None:
    """The networks NCCL used in one log; None when the log has no "Using network" line (no
    NCCL_DEBUG=INFO, no multi-GPU communicator, or a missing file)."""
    p = Path(path)
    if not p.is_file():
        return None
    nets: list[str] = []
    first: tuple[int, str] | None = None
    cause: tuple[int, str] | None = None
    lineno = 1
    for buf, lo, hi in iter_blocks(p, block):
        hits = []
        for anchor in (_USING, *_CAUSES):
            if anchor is not _USING and cause is not None:
                continue
            i = buf.find(anchor, lo, hi)
            while i >= 0:
                hits.append((i, anchor))
                i = buf.find(anchor, i + len(anchor), hi)
        counted = lo
        for pos, anchor in sorted(hits):
            ls = buf.rfind(b"\n", lo, pos) + 1
            ls = max(ls, lo)
            le = buf.find(b"\n", pos, hi)
            le = hi if le < 0 else le
            lineno += buf.count(b"\n", counted, ls)
            counted = ls
            text = decode(buf[ls:le])
            if anchor is _USING:
                # the rest of the line: a plugin's name may hold a space ("AWS Libfabric")
                name = " ".join(text.split("Using network ", 1)[1].split()) if "Using network " in text else ""
                if name and name not in nets:
                    nets.append(name)
                if first is None:
                    first = (lineno, _excerpt(text))
            elif cause is None:
                cause = (lineno, _excerpt(text))
        lineno += buf.count(b"\n", counted, hi)
    if first is None:
        return None
    return NcclNetwork(tuple(nets), first[0], first[1], cause[1] if cause else None,
                       cause[0] if cause else None)


__all__ = ["NcclNetwork", "in_family", "nccl_network"]
