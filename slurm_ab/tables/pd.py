"""A prefill/decode (PD) run's own tables: the TTFT breakdown, the KV transfer, each role instance's
load, KV usage and failures (summary.md and the CLI's printout; records from collect.pd)."""
from __future__ import annotations

from .table import DASH, Table, num


def _ms(x) -> str:
    return num(x, ".1f", " ms")


def _share(x) -> str:
    return DASH if x is None else f"{x * 100:.1f} %"


def breakdown_rows(pd) -> list[list[str]]:
    """The prefill's chain, 'other' and the client's mean TTFT they add up to."""
    b = pd.breakdown
    rows = [[s.label, _ms(s.mean_ms), _share(s.share), num(s.count, "g")] for s in b.chain]
    other_share = b.other_ms / b.client_ttft_ms if b.other_ms is not None and b.client_ttft_ms else None
    rows.append(["other: router, HTTP, tokenizer, first token to the client", _ms(b.other_ms),
                 _share(other_share), DASH])
    rows.append(["TTFT mean (client)", _ms(b.client_ttft_ms), "100 %" if b.client_ttft_ms else DASH, DASH])
    return rows


def _queues(i) -> str:
    return ", ".join(f"{k} {num(v, 'g')}" for k, v in i.queue_peaks) or DASH


def instance_rows(pd) -> list[list[str]]:
    return [[i.name, ", ".join(i.nodes) or DASH, num(i.requests, "g"), num(i.running_peak, "g"), _queues(i),
             num(i.kv_usage_peak, ".3f"), num(i.bootstrap_failed, "g"), num(i.transfer_failed, "g"),
             num(i.retracted, "g") if i.role == "decode" else DASH] for i in pd.instances]


def transfer_line(pd) -> str:
    t = pd.transfer
    if t is None or not t.requests:
        return "KV transfer: no transfer observed on the prefills in the window"
    return (f"KV transfer (prefills' sglang:kv_transfer_*, what each prefill's TP0 rank sent): {t.requests:g} "
            f"requests, {num(t.total_mb, '.1f')} MB, {num(t.mb_per_request, '.3f')} MB per request, "
            f"{_ms(t.latency_ms)} per request" + (f" ({t.latency_label})" if t.latency_label else "")
            + f", mean speed {num(t.speed_gb_s, '.3f')} GB/s")


def pd_md(s) -> str:
    """The '## Prefill/decode' section of a PD run's summary.md ('' for other runs)."""
    pd = getattr(s, "pd", None)
    if pd is None:
        return ""
    lines = ["## Prefill/decode", ""]
    b = pd.breakdown
    if b is not None:
        lines += ["TTFT breakdown (means over the benchmark window from the servers' /metrics; the prefill's "
                  "chain plus the decode's first step, the rest is what no server sees):", "",
                  Table.of(["component", "mean", "share of TTFT", "requests"], breakdown_rows(pd)).md(), ""]
        view = "; ".join(f"{x.label.removeprefix('decode: ')} {_ms(x.mean_ms)}" for x in b.decode_view)
        lines += [f"The decode's own view (cross-check): {view}.", ""]
    lines += [transfer_line(pd), ""]
    lines += ["Per role instance over the window (queue peaks: prefill bootstrap/inflight, decode "
              "prealloc/transfer; failures: sglang:num_bootstrap_failed_reqs_total, "
              "num_transfer_failed_reqs_total):", "",
              Table.of(["instance", "nodes", "requests", "running peak", "PD queue peaks", "KV usage peak",
                        "failed bootstraps", "failed transfers", "retracted"], instance_rows(pd)).md(), ""]
    return "\n".join(lines + [f"- {n}" for n in pd.notes] + ([""] if pd.notes else []))


def pd_lines(s) -> list[str]:
    """Short lines for the CLI: the TTFT breakdown in one line and the transfer."""
    pd = getattr(s, "pd", None)
    if pd is None or pd.breakdown is None:
        return []
    b = pd.breakdown
    parts = [f"{x.label} {_ms(x.mean_ms)} ({_share(x.share)})" for x in b.chain]
    other = b.other_ms / b.client_ttft_ms if b.other_ms is not None and b.client_ttft_ms else None
    parts.append(f"other {_ms(b.other_ms)} ({_share(other)})")
    return [f"TTFT breakdown (mean {_ms(b.client_ttft_ms)}): " + ", ".join(parts), transfer_line(pd)]
