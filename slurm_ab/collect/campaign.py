"""Collect a campaign: one row per pass, aggregates per (mode, concurrency), A/B comparisons.

Each pass is collected by the single-run collector (collect_run) on a *view* of its launch
directory: a temporary directory of symlinks to the launch's raw files (server, router, warm-up
logs, metrics, manifest), the pass's own client output as bench.jsonl / logs/client.log, and an
events.log holding the launch's events up to this pass's bench_end, without the other passes'
benchmark windows. So every single-run rule (verdict, windowed acceptance, diagnosis, latency
percentiles per pass) applies to a pass unchanged, and raw files are only read. File references in
reasons are rewritten to the launch directory.

A completed pass (bench_end rc=0) is judged as completed even if the job was later cancelled or a
later pass failed: its numbers were final when it ended.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from .. import rundir
from ..campaign import Campaign, Launch, Pass
from ..parse.events import EventLog, read_events
from ..parse.text import iter_lines
from . import campaign_tables as ct
from .records import RunSummary
from .summary import collect_run
from .tables import numeric_row

NOT_RUN = "not run"
PASS_EVENTS = ("bench_start", "bench_end", "metrics_scrape")


def campaign_of(run_dir: Path) -> Campaign | None:
    """The campaign a run directory holds (from its manifest), None for a single run."""
    m = rundir.read_manifest(Path(run_dir))
    return m.campaign if m else None


def pass_lines(events: EventLog, key: str) -> tuple[set[int] | None, int | None]:
    """Line numbers of the launch's events.log that belong to pass `key`'s view, and its client's
    exit status (None: it never ended). None for the lines: the pass never started."""
    start = next((e for e in events.events if e.name == "bench_start" and e.fields.get("pass") == key), None)
    if start is None:
        return None, None
    end = next((e for e in events.events if e.name == "bench_end" and e.fields.get("pass") == key
                and e.line > start.line), None)
    keep = set()
    for e in events.events:
        if end is not None and e.line > end.line:
            break
        if e.name in PASS_EVENTS and e.line < start.line:
            continue          # earlier passes' windows and scrapes
        keep.add(e.line)
    return keep, (end.get_int("rc") if end is not None else None)


def _link(src: Path, dst: Path) -> None:
    if src.exists():
        os.symlink(src.resolve(), dst)


def _view(ldir: Path, p: Pass, lines: set[int] | None, view: Path) -> None:
    """The pass as a run directory (symlinks and a filtered events.log)."""
    (view / "logs").mkdir(parents=True)
    _link(ldir / "manifest.json", view / "manifest.json")
    _link(ldir / f"bench-{p.key}.jsonl", view / "bench.jsonl")
    _link(ldir / "metrics", view / "metrics")
    _link(ldir / "preflight", view / "preflight")
    logs = ldir / "logs"
    if logs.is_dir():
        for f in logs.iterdir():
            if f.name.startswith("client-"):
                continue
            _link(f, view / "logs" / f.name)
        _link(logs / f"client-{p.key}.log", view / "logs" / "client.log")
    text = []
    if (ldir / "events.log").exists() and lines is not None:
        text = [t for no, t in iter_lines(ldir / "events.log") if no in lines]
    elif (ldir / "events.log").exists():
        text = [t for _, t in iter_lines(ldir / "events.log")]
    (view / "events.log").write_text("".join(t if t.endswith("\n") else t + "\n" for t in text))


def _relocate(text: str, launch: Launch, p: Pass) -> str:
    return (text.replace("[logs/client.log", f"[{launch.dirname}/logs/client-{p.key}.log")
                .replace("logs/client.log", f"{launch.dirname}/logs/client-{p.key}.log")
                .replace("[logs/", f"[{launch.dirname}/logs/")
                .replace("[bench.jsonl", f"[{launch.dirname}/bench-{p.key}.jsonl"))


def collect_pass(run_dir: Path, launch: Launch, p: Pass, sacct: Mapping | None,
                 events: EventLog | None = None) -> tuple[RunSummary | None, str, list[str]]:
    """(summary or None, verdict, reasons) of one pass."""
    ldir = Path(run_dir) / launch.dirname
    events = events if events is not None else read_events(ldir / "events.log")
    if not events.exists:
        return None, NOT_RUN, [f"launch {launch.index} ({launch.mode}) never started"]
    lines, rc = pass_lines(events, p.key)
    facts = dict(sacct) if sacct else None
    if rc == 0:                       # this pass completed whatever happened to the job later
        facts = dict(facts or {}, state="COMPLETED", exit_code="0:0")
    with tempfile.TemporaryDirectory(prefix="slurm-ab-pass-") as tmp:
        view = Path(tmp) / "pass"
        _view(ldir, p, lines, view)
        s = collect_run(view, sacct=facts, workers=1)
    if lines is None and s.verdict == "ok":   # cannot happen: no benchmark ran
        s = replace(s, verdict="failed")
    reasons = [_relocate(r, launch, p) for r in s.reasons]
    if lines is None and s.verdict not in ("cancelled", "timeout", "running"):
        reasons.append(f"pass {p.key} never started: launch {launch.index} ({launch.mode}) ended first")
    s = replace(s, reasons=tuple(reasons), run_id=f"{s.run_id}/{launch.dirname}/{p.key}",
                notes=tuple(_relocate(n, launch, p) for n in s.notes))
    return s, s.verdict, reasons


def pass_row(launch: Launch, p: Pass, s: RunSummary | None, verdict: str, reasons: list[str]) -> dict:
    row = numeric_row(s) if s is not None else {}
    row.update({"mode": p.mode, "concurrency": p.concurrency, "repeat": p.repeat,
                "launch": launch.index, "pass": p.key, "prompts": p.prompts,
                "verdict": verdict, "reason": reasons[0] if reasons else ""})
    return row


def launch_status(root_events: EventLog) -> dict[int, dict]:
    """launch index -> fields of its launch_end line in the job's events.log."""
    return {e.get_int("launch"): dict(e.fields) for e in root_events.named("launch_end")
            if e.get_int("launch") is not None}


def collect_campaign(run_dir: str | Path, sacct: Mapping | None = None) -> dict:
    """Everything about a campaign as one JSON-ready dict (pure but for reading files)."""
    run_dir = Path(run_dir)
    campaign = campaign_of(run_dir)
    if campaign is None:
        raise ValueError(f"{run_dir} is not a campaign")
    manifest = rundir.read_manifest(run_dir) or rundir.Manifest()
    root_events = read_events(rundir.Layout(run_dir).events)
    status = launch_status(root_events)
    rows, launches = [], []
    for launch in campaign.launches:
        events = read_events(run_dir / launch.dirname / "events.log")
        verdicts = []
        for p in launch.passes:
            s, verdict, reasons = collect_pass(run_dir, launch, p, sacct, events)
            if p.burn_in:
                verdicts.append(f"{p.key}: {verdict} (burn-in, discarded)")
                continue
            rows.append(pass_row(launch, p, s, verdict, reasons))
            verdicts.append(f"{p.key}: {verdict}")
        st = status.get(launch.index, {})
        fail = next((e for e in events.failures()), None)
        launches.append({
            "launch": launch.index, "mode": launch.mode, "dir": launch.dirname,
            "status": st.get("status") or ("not run" if not events.exists else "unfinished"),
            "failure": dict(fail.fields) if fail else None, "passes": verdicts})
    comparisons = []
    if len(campaign.modes) >= 2:
        a_mode = campaign.modes[0]
        for b_mode in campaign.modes[1:]:
            for c in campaign.concurrencies:
                comparisons.append({"a": a_mode, "b": b_mode, "concurrency": c,
                                    "metrics": ct.comparison(rows_of(rows, a_mode, c),
                                                             rows_of(rows, b_mode, c))})
    running = sacct is not None and str(sacct.get("state", "")).upper() in ("RUNNING", "PENDING",
                                                                           "CONFIGURING", "COMPLETING")
    return {"run_id": manifest.run_id or run_dir.name, "job_id": manifest.job_id,
            "campaign": campaign.to_dict(), "variance": campaign.variance,
            "job_state": (sacct or {}).get("state"), "running": running,
            "launches": launches, "passes": rows,
            "aggregates": ct.aggregate_records(rows), "comparisons": comparisons}


def campaign_md(result: dict, passes: bool = False) -> str:
    """The campaign's tables: launches, aggregates (or passes), comparisons, curve."""
    c = Campaign.from_dict(result["campaign"])
    rows = result["passes"]
    out = [f"# Campaign {result['run_id']}", "",
           f"{len(c.modes)} mode(s), {c.repeats} repeat(s), concurrency "
           f"{', '.join(map(str, c.concurrencies))}, order {c.order}"
           + (", burn-in pass per launch" if c.burn_in else "")
           + f"; job {result.get('job_id') or '?'} ({result.get('job_state') or 'state unknown'})", ""]
    for la in result["launches"]:
        fail = la.get("failure") or {}
        why = f" ({fail.get('kind')})" if fail else ""
        out.append(f"- launch {la['launch']} {la['mode']}: {la['status']}{why} -- " + ", ".join(la["passes"]))
    out += ["", "## Passes" if passes else "## Aggregates (mean ± 95% half-width over ok passes)", ""]
    out.append((ct.passes_table(rows) if passes else ct.aggregate_table(rows)).rstrip("\n"))
    for cmp in result["comparisons"]:
        out += ["", comparison_section(result, cmp).rstrip("\n")]
    if len(c.concurrencies) > 1:
        out += ["", "## Throughput-latency curve", "", ct.curve_table(rows).rstrip("\n")]
    return "\n".join(out) + "\n"


def comparison_section(result: dict, cmp: dict) -> str:
    """One comparison of a campaign (B against A at one concurrency) under its heading."""
    rows, c = result["passes"], cmp["concurrency"]
    return (f"## {cmp['b']} vs {cmp['a']} at concurrency {c}\n\n"
            + ct.comparison_table(cmp["a"], cmp["b"], rows_of(rows, cmp["a"], c),
                                  rows_of(rows, cmp["b"], c), result["variance"]))


def rows_of(rows: list[dict], mode: str, concurrency) -> list[dict]:
    """The pass rows of one (mode, concurrency)."""
    return [r for r in rows if r["mode"] == mode and r["concurrency"] == concurrency]


def campaign_csv(result: dict) -> str:
    import pandas as pd
    return pd.DataFrame(result["passes"]).to_csv(index=False, lineterminator="\n")


def write_campaign(result: dict, run_dir: str | Path) -> list[Path]:
    """summary.json (everything), summary.csv (one row per pass), summary.md (the tables);
    atomic and idempotent; nothing for a running job."""
    if result.get("running"):
        return []
    lay = rundir.Layout(Path(run_dir))
    texts = {"summary.json": json.dumps(result, indent=2, sort_keys=True, default=str) + "\n",
             "summary.csv": campaign_csv(result), "summary.md": campaign_md(result)}
    return [lay.summary(n) for n, t in texts.items() if rundir.write_atomic(lay.summary(n), t)]


def collect_campaign_and_write(run_dir: Path, *, job_id: str | None = None,
                               final: bool = True) -> tuple[dict, list[Path]]:
    from .slurm_facts import slurm_facts

    jid = job_id or rundir.job_id_of(run_dir)
    facts = slurm_facts(str(jid)) if final and jid else None
    result = collect_campaign(run_dir, facts)
    written = write_campaign(result, run_dir)
    from .run import write_report
    return result, written + write_report(run_dir, changed=bool(written), running=bool(result.get("running")))


def comparison_json(result: dict) -> str:
    """`compare --format json` of a campaign."""
    return json.dumps({"variance": result["variance"], "comparisons": result["comparisons"]},
                      indent=2) + "\n"
