"""The slurm-ab command. Heavy libraries (pandas, submitit) load only in the commands that use them."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .campaign import campaign_options
from ..model.errors import ConfigError, ConfigErrors, UsageError


def _config_options(f):
    f = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override one value, e.g. benchmark.num_prompts=20 (mode.X is short for modes.<MODE>.X).")(f)
    f = click.option("--config", "configs", multiple=True, type=click.Path(dir_okay=False),
                     help="Experiment TOML layered over the site (repeatable).")(f)
    f = click.option("--site", default=None, metavar="NAME|FILE",
                     help="Site profile: a name (built-in: example; or NAME.toml in $SLURM_AB_SITES dirs) or a TOML file; default $SLURM_AB_SITE or 'example'.")(f)
    return f


def _time_option(f):
    return click.option("--time", "time_limit", default=None, metavar="[D-]HH:MM:SS|auto",
                        help="The job's time limit (cluster.time_limit). auto (the default unless the site "
                             "pins one): sized by the job's estimated duration (shown by dry-run), bounded "
                             "by the partition's MaxTime; a limit shorter than the estimate is refused.")(f)


def _plan(site, configs, sets, time_limit, modes, run_id, repeats, concurrency, order, burn_in):
    """The validated plan of a job (one mode or several), its time limit fitted to its estimate."""
    import json

    from . import campaign as campaign_cli
    from ..model.duration import fit_time_limit, partition_limit

    if time_limit is not None:
        sets = (*sets, f"cluster.time_limit={json.dumps(time_limit)}")
    def make(launches=None):
        return campaign_cli.plan(_sources(site, configs, sets), modes, run_id, repeats, concurrency, order, burn_in,
                                 launches)

    plan = make()
    part = partition_limit(plan.exp)
    if plan.campaign.campaign.sequential and not campaign_cli.sequential_fixed_launches():
        return campaign_cli.fit_blocks(make, lambda p: fit_time_limit(p, partition=part))
    return fit_time_limit(plan, partition=part)


def _sources(site, configs, sets):
    from ..model.sources import Sources

    return Sources(site, tuple(configs), tuple(sets))


class _Group(click.Group):
    """Turns user errors into one clear message and exit status 2, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ConfigErrors as e:
            for err in e.errors:
                click.echo(f"slurm-ab: error: {err}", err=True)
            sys.exit(e.exit_code)
        except (ConfigError, UsageError) as e:
            click.echo(f"slurm-ab: error: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="slurm-ab")
def main():
    """Generate, submit, watch and collect A/B benchmarks of LLM serving on Slurm."""


@main.command()
@_config_options
def modes(site, configs, sets):
    """List the experiment's modes with their parallelism."""
    from ..model.errors import ConfigError, ConfigErrors
    from ..model.sources import load_experiment, mode_names

    src = _sources(site, configs, sets)
    for name in mode_names(src):
        try:
            exp = load_experiment(src, name)        # the model: merged, references filled in
        except (ConfigError, ConfigErrors) as e:   # listed, with why it cannot run
            click.echo(f"{name:<16} (invalid: {e.errors[0] if isinstance(e, ConfigErrors) else e})")
            continue
        click.echo(_mode_line(exp.mode))


def _mode_line(m) -> str:
    """One mode as `modes` lists it: each role's parallelism once (the description usually starts
    with it, "2 x TP32/PP1/EP4 + DFlash"; a PD mode's says it in words) and the mode's own flags."""
    extra = ", ".join(f"{k}={v}" for k, v in m.args)
    par = " + ".join(f"{r.instances} x {r.name + ' ' if r.kind.disaggregation else ''}TP{r.tp}/PP{r.pp}/EP{r.ep}"
                     + (f" ({r.nodes} nodes)" if r.kind.disaggregation else "") for r in m.roles)
    if m.disaggregated:
        return f"{m.name:<16} {m.description or par}" + (f"  [both roles: {extra}]" if extra else "")
    head = m.description if m.description.startswith(par) else f"{par}  {m.description}".rstrip()
    return f"{m.name:<16} {head}, {m.roles[0].nodes} nodes per replica{'  [' + extra + ']' if extra else ''}"


@main.command("dry-run")
@click.argument("modes", nargs=-1, required=True)
@click.option("--run-id", default=None, help="Run id (default $RUN_ID or <experiment>-<mode>-<timestamp>).")
@campaign_options
@_time_option
@_config_options
def dry_run(modes, run_id, repeats, concurrency, order, burn_in, time_limit, site, configs, sets):
    """Print the complete job script (stdout) and a resolved summary (stderr); submit nothing.

    Several MODES (or --repeats/--concurrency/--order/--burn-in): a campaign in one allocation."""
    from . import campaign as campaign_cli
    from ..job.campaign_plan import campaign_summary
    from ..job.render import render_script, summary

    from ..job.submit import check_collector

    plan = _plan(site, configs, sets, time_limit, modes, run_id, repeats, concurrency, order, burn_in)
    script = render_script(plan)
    collector = "".join(f"{n}\n" for n in check_collector(plan.exp))
    click.echo(summary(plan) + campaign_summary(plan) + collector, err=True, nl=False)
    click.echo(script, nl=False)


@main.command()
@click.argument("modes", nargs=-1, required=True)
@click.option("-o", "--output", "output", default=None, type=click.Path(dir_okay=False),
              help="Also write a copy here ('-' for stdout).")
@click.option("--run-id", default=None, help="Run id (default $RUN_ID or <experiment>-<mode>-<timestamp>).")
@campaign_options
@_time_option
@_config_options
def render(modes, output, run_id, repeats, concurrency, order, burn_in, time_limit, site, configs, sets):
    """Prepare results/<RUN_ID>/ with job.sbatch and a manifest, without submitting.

    `sbatch results/<RUN_ID>/job.sbatch` then runs it on its own.
    """
    from . import campaign as campaign_cli
    from ..model import rundir
    from ..job.render import render_script
    from ..job.submit import prepare

    plan = _plan(site, configs, sets, time_limit, modes, run_id, repeats, concurrency, order, burn_in)
    out = Path(output) if output and output != "-" else None
    if out is not None and out.exists():
        raise UsageError(f"{out} exists; slurm-ab does not overwrite files (choose another -o)")
    if output == "-":
        click.echo(render_script(plan), nl=False)
    run_dir, script, _ = prepare(plan)
    if out is not None:
        out.write_text(script)
        out.chmod(0o755)
    script_path = rundir.Layout(run_dir).job_script
    click.echo(f"wrote {script_path}{' and ' + str(out) if out else ''} (run {plan.run_id}); "
               f"submit with: sbatch {script_path}", err=True)


@main.command()
@click.argument("modes", nargs=-1, required=True)
@click.option("--run-id", default=None, help="Run id (default $RUN_ID or <experiment>-<mode>-<timestamp>).")
@click.option("--wait", is_flag=True, help="Follow the job to its end, then collect it.")
@click.option("-v", "--verbose", is_flag=True, help="With --wait: every event line of the job (metrics scrapes included).")
@click.option("--no-collector", is_flag=True, help="Do not chain the collector job after the experiment.")
@click.option("--no-report", "no_report", is_flag=True,
              help="Write the summary files only; the report page and its plots wait for the next collect or report --html.")
@campaign_options
@_time_option
@_config_options
def submit(modes, run_id, wait, verbose, no_collector, no_report, repeats, concurrency, order, burn_in, time_limit, site,
           configs, sets):
    """Submit MODE as a heterogeneous job into a new results/<RUN_ID>/.

    Several MODES (e.g. tp32 tp32-dflash --repeats 3): a campaign, every mode in turn in one
    allocation, with a comparison (95% intervals) at the end."""
    from ..job.submit import submit as do_submit

    plan = _plan(site, configs, sets, time_limit, modes, run_id, repeats, concurrency, order, burn_in)
    s = do_submit(plan, collector=not no_collector)
    n = len(plan.campaign.campaign.passes)
    _submitted(plan, s, f"{', '.join(plan.campaign.modes)}: {n} timed pass{'es' if n != 1 else ''}",
               wait, verbose, no_report)


def _submitted(plan, s, what: str, wait: bool, verbose: bool, no_report: bool) -> None:
    """What every submitting command says once sbatch took the job: the plan's warnings (a
    teardown grace over Slurm's KillWait), the job and run directory, its collector, then either
    the follow-up commands or, with --wait, the job followed to its end and collected."""
    for w in plan.duration.warnings:
        click.echo(f"slurm-ab: warning: {w}", err=True)
    click.echo(f"submitted job {s.job_id} ({what}, run {plan.run_id})")
    click.echo(f"run directory: {s.run_dir}")
    if s.collector_job_id:
        click.echo(f"collector job {s.collector_job_id} runs after it (afterany)")
    if wait:
        _follow_and_collect(s.job_id, s.run_dir, verbose=verbose, report=not no_report)
    else:
        click.echo(f"follow: slurm-ab watch {s.job_id}   tables: slurm-ab collect {s.job_id}")


@main.command()
@click.argument("modes", nargs=-1, required=True)
@click.option("--slo", default=None, metavar="ttft:MS,tpot:MS[,e2el:MS]",
              help="The SLOs a request must meet (as bench_serving's --goodput; default [capacity] slo_*_ms).")
@click.option("--attainment", default=None, metavar="90%|0.9",
              help="Share of a probe's requests that must meet every SLO (default capacity.attainment).")
@click.option("--rates", default=None, metavar="LO:HI", help="The search's bracket in req/s (default capacity.rate_lo/hi).")
@click.option("--probes", type=int, default=None, help="Bisection steps per mode (default capacity.probes).")
@click.option("--prompts", type=int, default=None, help="Requests per probe (default capacity.prompts, else benchmark.num_prompts).")
@click.option("--run-id", default=None, help="Run id (default $RUN_ID or <experiment>-<mode>-<timestamp>).")
@click.option("--dry-run", "dry", is_flag=True, help="Print the job script and its summary; submit nothing.")
@click.option("--wait", is_flag=True, help="Follow the job to its end, then collect it.")
@click.option("--no-collector", is_flag=True, help="Do not chain the collector job after the experiment.")
@click.option("--no-report", "no_report", is_flag=True, help="Write the summary files only.")
@_time_option
@_config_options
def capacity(modes, slo, attainment, rates, probes, prompts, run_id, dry, wait, no_collector, no_report, time_limit,
             site, configs, sets):
    """Find each MODE's capacity: the highest request rate at which --attainment of the requests meet
    the SLOs (DistServe's goodput), by bisection over open-loop probes in one launch per mode; two
    or more modes: their capacities compared (docs/campaigns.md "Capacity")."""
    import json

    from ..job.campaign_plan import CampaignOptions, campaign_summary, plan_job
    from ..model.duration import fit_time_limit, partition_limit

    extra = list(capacity_sets(slo, attainment, rates, probes, prompts))
    if time_limit is not None:
        extra.append(f"cluster.time_limit={json.dumps(time_limit)}")
    plan = plan_job(_sources(site, configs, (*sets, *extra)), list(modes), run_id, CampaignOptions(capacity=True))
    plan = fit_time_limit(plan, partition=partition_limit(plan.exp))
    if dry:
        from ..job.render import render_script, summary
        click.echo(summary(plan) + campaign_summary(plan), err=True, nl=False)
        click.echo(render_script(plan), nl=False)
        return
    from ..job.submit import submit as do_submit
    s = do_submit(plan, collector=not no_collector)
    _submitted(plan, s, f"capacity search of {', '.join(plan.campaign.modes)}", wait, False, no_report)


def capacity_sets(slo, attainment, rates, probes, prompts):
    """The capacity command's options as --set values of [capacity] (ConfigError naming the option)."""
    if slo:
        keys = {"ttft": "slo_ttft_ms", "tpot": "slo_tpot_ms", "e2el": "slo_e2e_ms", "e2e": "slo_e2e_ms"}
        for item in slo.split(","):
            k, _, v = item.strip().partition(":")
            try:
                ms = float(v)
            except ValueError:
                ms = -1.0
            if k not in keys or not ms > 0:
                raise ConfigError("--slo", slo, f"{item!r} is not METRIC:MS", "ttft:MS, tpot:MS, e2el:MS with MS > 0")
            yield f"capacity.{keys[k]}={ms}"
    if attainment:
        text = attainment.strip()
        try:
            share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise ConfigError("--attainment", attainment, "not a share of requests", "e.g. 90% or 0.9")
        yield f"capacity.attainment={share}"
    if rates:
        lo, _, hi = rates.partition(":")
        try:
            lo_f, hi_f = float(lo), float(hi)
        except ValueError:
            raise ConfigError("--rates", rates, "not LO:HI", "requests per second, e.g. 0.5:8") from None
        yield f"capacity.rate_lo={lo_f}"
        yield f"capacity.rate_hi={hi_f}"
    if probes is not None:
        yield f"capacity.probes={probes}"
    if prompts is not None:
        yield f"capacity.prompts={prompts}"


def _results_dir() -> Path:
    import os

    return Path(os.environ.get("SLURM_AB_RESULTS", "results"))


def _find_run(ref: str) -> Path:
    from ..model import rundir

    return rundir.find(ref, _results_dir())


def _job_id(run_dir: Path) -> str:
    from ..model import rundir

    jid = rundir.job_id_of(run_dir)
    if not jid:
        raise UsageError(f"{run_dir} records no job id (was it submitted?)")
    return str(jid)


def _follow_and_collect(job_id: str, run_dir: Path, verbose: bool = False, report: bool = True) -> None:
    """Follow a run or a campaign to its end (a bar on a terminal, else phase lines), collect it,
    print its tables; exit 1 unless its verdict is ok (a campaign's: every pass ok)."""
    from ..model import rundir
    from ..job.progress import follow_live

    state = follow_live(job_id, run_dir, verbose=verbose)
    click.echo(f"job {job_id} ended: {state}")
    cs, _ = _collect_and_print(run_dir, job_id=job_id, report=report)
    md = rundir.Layout(run_dir).summary("md")
    click.echo(f"summary: {md}" if md.exists() else "no summary written")
    if cs.verdict != "ok":
        sys.exit(1)


def _width() -> int:
    """The terminal's width: $COLUMNS, else the terminal's own, else 120 (output to a pipe)."""
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


def _paint(text: str, colour: str) -> str:
    """An answer's verdict in the terminal's nearest colour (click strips it when not a tty)."""
    from ..tables.answer import TERMINAL

    name = TERMINAL.get(colour)
    return click.style(text, fg=name, bold=True) if name else click.style(text, bold=True)


def _collect_and_print(run_dir: Path, **kw):
    from ..collect import collect_and_write
    from ..tables import collect_text

    cs, written = collect_and_write(run_dir, **{k: v for k, v in kw.items() if k != "passes"})
    click.echo(collect_text(cs, passes=kw.get("passes", False), width=_width(), paint=_paint).rstrip("\n"))
    return cs, written


@main.command()
@click.argument("run")
@click.option("-v", "--verbose", is_flag=True, help="Every event line of the job (metrics scrapes included).")
@click.option("--no-report", "no_report", is_flag=True,
              help="Write the summary files only; the report page and its plots wait for the next collect or report --html.")
def watch(run, verbose, no_report):
    """Follow a run (RUN_ID, JOBID or directory) until its job ends, then collect it."""
    run_dir = _find_run(run)
    _follow_and_collect(_job_id(run_dir), run_dir, verbose=verbose, report=not no_report)


@main.command()
@click.argument("run")
@click.option("--all-samples", is_flag=True, help="Average decode samples of the whole logs (warm-ups included), as in the seed.")
@click.option("--no-report", "no_report", is_flag=True,
              help="Write the summary files only; the report page and its plots wait for the next collect or report --html.")
def collect(run, all_samples, no_report):
    """Turn a run's (or campaign's) raw logs into summary.json/csv/md and print its tables and
    verdict.

    RUN is a job id, a run id or a run directory. Idempotent; raw logs are never changed; a
    running job is reported as such and nothing final is written.
    """
    from ..model import rundir

    run_dir = _find_run(run)
    if not rundir.submitted(run_dir):
        raise UsageError(f"{run_dir} was prepared but never submitted (no job id, no {rundir.RELATIVE.events}): "
                         f"sbatch {rundir.Layout(run_dir).job_script}")
    cs, written = _collect_and_print(run_dir, all_samples=all_samples, report=not no_report)
    if cs.verdict == "running":
        click.echo(f"{run_dir}: the job is still running; nothing final written")
    else:
        from ..tables.table import wrap

        click.echo(wrap(f"wrote {', '.join(p.name for p in written)}", _width(), "    ") if written
                   else "summary files unchanged")


def _summaries(dirs: list[Path]):
    """The one pass of each job (its summary files rewritten when they changed); no missing page
    drawn."""
    from ..collect import collect_and_write
    from ..tables.campaign import the_pass

    return [the_pass(collect_and_write(d, report=False)[0]) for d in dirs]


def _draw_missing_pages(pairs) -> None:
    """The report.html of each (run dir, summary) that has none: an --html page links to them."""
    from ..collect.run import write_report

    for d, s in pairs:
        write_report(d, changed=False, running=s.verdict == "running")


def _html_option(f):
    return click.option("--html", "html_out", default=None, type=click.Path(dir_okay=False),
                        help="Also write a self-contained HTML page with plots to this file.")(f)


@main.command()
@click.argument("runs", nargs=-1)
@click.option("--passes", is_flag=True, expose_value=False,
              callback=lambda ctx, _p, v: ctx.meta.__setitem__("passes", v),
              help="For a campaign: every pass instead of the per-(mode, concurrency) aggregates.")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default=None,
              help="Whole tables as markdown, CSV or JSON (default: text fitted to $COLUMNS, else 120 columns).")
@click.option("--since", default=None, metavar="DATE",
              help="Only runs submitted since DATE (YYYY-mm-dd[ HH:MM], local time) or an age (12h, 7d).")
@click.option("--mode", "modes", multiple=True, metavar="M", help="Only runs of mode M (repeatable).")
@click.option("--verdict", "verdicts", multiple=True, metavar="V",
              type=click.Choice(["ok", "invalid", "failed", "cancelled", "timeout", "running"]),
              help="Only runs with verdict V (repeatable).")
@_html_option
def report(runs, fmt, since, modes, verdicts, html_out):
    """One row per run (default: every run under results/, oldest first), in the seed's layout."""
    from . import campaign as campaign_cli
    from ..model import rundir
    from ..tables.runs import runs_text

    width = None if fmt else _width()
    fmt = fmt or "md"
    if len(runs) == 1 and campaign_cli.shown_as_campaign(_find_run(runs[0])):
        passes = click.get_current_context().meta.get("passes", False)
        click.echo(campaign_cli.report(_find_run(runs[0]), passes, fmt, width), nl=False)
        if html_out:
            from ..report.campaign import render_campaign
            _write_page(html_out, render_campaign(_find_run(runs[0]), base_dir=Path(html_out).parent))
        return
    from ..report.select import by_verdict, parse_since, select, submitted

    dirs = [_find_run(r) for r in runs] if runs else rundir.all_runs(_results_dir())
    if since or modes or not runs:              # the history: oldest first
        dirs = select(dirs, since=parse_since(since) if since else None, modes=modes)
    campaigns = [d for d in dirs if campaign_cli.shown_as_campaign(d)]   # their own tables
    if campaigns:
        click.echo("campaigns (slurm-ab report CAMPAIGN): " + ", ".join(d.name for d in campaigns), err=True)
        dirs = [d for d in dirs if d not in campaigns]
    pairs = list(zip(dirs, _summaries(dirs)))
    pairs = [(d, s) for d, s in pairs if by_verdict([s], verdicts)]
    if not pairs:
        filt = " matching the filters" if since or modes or verdicts else ""
        raise UsageError(f"no runs{filt} under {_results_dir()}" if not runs else f"no runs{filt}")
    summaries = [s for _, s in pairs]
    dates = [submitted(d) for d, _ in pairs]
    click.echo(runs_text(summaries, fmt, width, dates).rstrip("\n"))
    if html_out:
        from ..report import render_runs_html

        _draw_missing_pages(pairs)
        _write_page(html_out, render_runs_html([d for d, _ in pairs], runs_text(summaries, "md", dates=dates),
                                               base_dir=Path(html_out).parent, campaigns=campaigns))


def _write_page(path: str, text: str) -> None:
    from ..report.write import write_html

    click.echo(f"wrote {write_html(path, text)}", err=True)


@main.command()
@click.argument("run_a")
@click.argument("run_b", required=False)
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default=None,
              help="Whole tables as markdown, CSV or JSON (default: text fitted to $COLUMNS, else 120 columns).")
@click.option("--margin", default=None, metavar="PCT",
              help="Equivalence margin (default: the campaign's / A's benchmark.margin_pct; 0: none).")
@click.option("--trust-jobs", is_flag=True,
              help="Two separate jobs: give plain verdicts, as if job-to-job variance were negligible (by "
                   "default they are qualified '(separate jobs)': job and mode are confounded).")
@_html_option
def compare(run_a, run_b, fmt, margin, trust_jobs, html_out):
    """B against A: two runs (the seed's table, signed % change), or with campaigns (one
    campaign of several modes, or two campaigns/runs) per metric the change, its 95% interval
    and a verdict."""
    from . import campaign as campaign_cli
    from ..tables.paired import paired_answer, paired_text

    width = None if fmt else _width()
    fmt = fmt or "md"
    refs = [r for r in (run_a, run_b) if r]
    if len(refs) == 1:
        click.echo(campaign_cli.compare(refs, fmt, _find_run, margin, trust_jobs, width, _paint), nl=False)
        if html_out:                                # the campaign's page holds its comparisons
            from ..report.campaign import render_campaign
            _write_page(html_out, render_campaign(_find_run(refs[0]), base_dir=Path(html_out).parent))
        return
    if any(campaign_cli.shown_as_campaign(_find_run(r)) for r in refs):
        sides = campaign_cli.pair(refs, _find_run, margin, trust_jobs)   # collected once for every output
        click.echo(campaign_cli.pair_text(sides, fmt, width, paint=_paint), nl=False)
        if html_out:
            from ..ab_stats import METRIC_BY_NAME
            from ..report import render_compare_html
            forests = {c: [dict(r.to_dict(), label=METRIC_BY_NAME[r.metric].label) for r in rows
                           if r.delta.change_pct is not None and r.metric in METRIC_BY_NAME]
                       for c, rows in campaign_cli.pair_comparisons(sides)}
            _write_page(html_out, render_compare_html(
                _find_run(refs[0]), _find_run(refs[1]), campaign_cli.pair_text(sides, "md", head=False),
                base_dir=Path(html_out).parent, forests=forests, answers=campaign_cli.pair_answers(sides)))
        return

    a, b = _summaries([_find_run(run_a), _find_run(run_b)])
    metrics = None
    if fmt == "json":   # the rows and warnings, plus the per-metric records (n=1: no interval)
        from ..ab_stats import deltas
        from ..collect.rows import numeric_row

        metrics = [d.to_dict() for d in deltas([numeric_row(a)], [numeric_row(b)])]
    answer = paired_answer(a, b)
    if fmt == "md":
        click.echo(answer.text(width, _paint) + "\n")
    click.echo(paired_text(a, b, fmt, metrics, width).rstrip("\n"))
    if fmt == "md":
        from ..tables.table import notes
        click.echo(notes(["inconclusive (n=1): one run per side, no interval can be given; a campaign "
                          "with --repeats gives 95% intervals and verdicts"], width=width).lstrip("\n"))
    if html_out:
        from ..report import render_compare_html

        _write_page(html_out, render_compare_html(_find_run(run_a), _find_run(run_b), paired_text(a, b, "md"),
                                                  base_dir=Path(html_out).parent))


@main.command()
@click.option("--mode", "modes", multiple=True, metavar="M", help="Only mode M (repeatable).")
@click.option("--workload", default="", metavar="TEXT",
              help="Only workloads containing TEXT, e.g. 'C=8' or '16384->512'.")
@click.option("--since", default=None, metavar="DATE", help="Only runs submitted since DATE (YYYY-mm-dd[ HH:MM]) or an age (30d).")
@click.option("--metric", default=None, metavar="NAME",
              help="The metric of the trends (history.metric; default: steady-state output TPS where every run "
                   "of a series has it, else output TPS).")
@click.option("--rebuild", is_flag=True, help="Rebuild the index from the collected run directories under results/ (their summaries).")
@click.option("--index", "index_path", default=None, type=click.Path(dir_okay=False),
              help="The index file (history.index; default: ~/.cache/slurm-ab, one per results directory).")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md", show_default=True)
@_html_option
@_config_options
def history(modes, workload, since, metric, rebuild, index_path, fmt, html_out, site, configs, sets):
    """Trends of every collected run and campaign per mode, configuration and workload over dates,
    with the regressions and improvements a change-point detector marks at the run where they began.

    The index (SQLite, off results/) is brought up to date from the run directories first; it is
    derived, never the source of truth (docs/history.md)."""
    from . import history as history_cli

    text, page = history_cli.run(_sources(site, configs, sets), _results_dir(), modes=modes, workload=workload,
                                 since=since, metric=metric, rebuild=rebuild, index=index_path, fmt=fmt,
                                 html=bool(html_out))
    click.echo(text, nl=False)
    if html_out:
        _write_page(html_out, page)


@main.command()
@click.argument("run")
def cancel(run):
    """Cancel a run's job (RUN_ID, JOBID or directory); its directory and logs stay. A running job's
    batch script tears down and cleans its nodes first (scancel -b -s USR1), then the job is
    cancelled (docs/failures.md)."""
    from ..job.cancel import cancel_run

    run_dir = _find_run(run)
    cancel_run(run_dir, _job_id(run_dir), echo=click.echo)


@main.command()
@click.argument("runs", nargs=-1)
@click.option("--yes", is_flag=True, help="Submit the clean-up job (without it: only list what may be left).")
def clean(runs, yes):
    """What ended runs (RUN_ID, JOBID or directory; default every run under results/) may have left
    on their nodes: named containers and per-job cache directories their own clean-up could not
    remove (a cancel, time-out or lost node). Lists them; --yes submits one small job on those
    nodes that removes every ended slurm-ab job's leftovers there (never an active job's)."""
    import time as _time

    from ..job.clean import clean_script, run_clean, stale_runs

    stale = stale_runs(_results_dir(), tuple(runs))
    if not stale:
        click.echo("nothing left by ended runs: their clean-up ran, or they had nothing to remove")
        return
    for s in stale:
        click.echo(f"{s.run_dir.name} (job {s.left.job_id}): {s.left.text()}")
    if not yes:
        click.echo("nothing removed (dry run): `slurm-ab clean --yes` submits a job on those nodes that removes them")
        return
    out = _results_dir().resolve() / f"clean-{_time.strftime('%Y%m%d-%H%M%S')}.out"
    script = out.with_suffix(".sbatch")
    script.write_text(clean_script(stale, out))
    if not run_clean(script, out, click.echo):
        sys.exit(1)


@main.command("plan")
@click.argument("modes", nargs=2)
@click.option("--from", "from_campaign", default=None, metavar="CAMPAIGN",
              help="Estimate launch and pass variance from this collected campaign (times: as --time auto's "
                   "estimate, from [estimate] and earlier runs under paths.results).")
@click.option("--launch-cov", type=float, default=None, metavar="PCT", help="Launch-to-launch CoV, percent.")
@click.option("--pass-cov", type=float, default=None, metavar="PCT", help="Pass-to-pass CoV, percent.")
@click.option("--load-min", type=float, default=None,
              help="Model load (server start to ready), minutes (default: --time auto's estimate).")
@click.option("--pass-min", type=float, default=None,
              help="One timed pass, client start-up included, minutes (default: --time auto's estimate).")
@click.option("--detect", default=None, metavar="PCT", help="Smallest change to detect (default 5%).")
@click.option("--power", type=float, default=0.8, show_default=True, help="... detected this often.")
@click.option("--halfwidth", default=None, metavar="PCT", help="Or: a 95%% interval half-width to reach.")
@click.option("--time-limit-min", type=float, default=None,
              help="Job time limit, minutes (default: cluster.time_limit, or the partition's MaxTime when auto).")
@click.option("--ar1", type=float, default=None,
              help="Correlation of consecutive passes of a launch (default: estimated by --from with 3+ passes "
                   "per launch, else 0).")
@click.option("--drift", "drift_pct", type=float, default=None, metavar="PCT",
              help="Drift per pass over the job, percent (default: estimated by --from, else 0).")
@click.option("--sequential/--fixed", "sequential", default=None,
              help="Plan a sequential design (a look after every block; priced by expected and maximum "
                   "node-hours). Default: benchmark.sequential.")
@click.option("--margin", default=None, metavar="PCT",
              help="Equivalence margin of a sequential design (default: benchmark.margin_pct).")
@click.option("--prior-from", "prior_from", default=None, metavar="CAMPAIGN",
              help="Price the sequential design with submit --prior-from CAMPAIGN's prior: that collected "
                   "pilot's launch-mean variance pooled into every simulated look as the job pools it; the "
                   "output shows expected node-hours with and without it. Needs --sequential.")
@_config_options
def plan_cmd(modes, from_campaign, launch_cov, pass_cov, load_min, pass_min, detect, power, halfwidth,
             time_limit_min, ar1, drift_pct, sequential, margin, prior_from, site, configs, sets):
    """The cheapest campaign design (launches per mode, passes per launch, order) comparing two
    MODES to a target, its node-hours, queue waits and A/A false-positive rate."""
    from ..ab_stats import planner
    from . import planner as planner_cli

    opts = {"launch_cov": None if launch_cov is None else launch_cov / 100.0,
            "pass_cov": None if pass_cov is None else pass_cov / 100.0, "load_min": load_min,
            "pass_min": pass_min, "detect": detect, "power": power, "halfwidth": halfwidth,
            "time_limit_min": time_limit_min, "ar1": ar1, "drift_pct": drift_pct, "sequential": sequential,
            "margin": margin, "prior_from": prior_from}
    src = _find_run(from_campaign) if from_campaign else None
    p, notes = planner_cli.plan_for_modes(_sources(site, configs, sets), tuple(modes), src, opts)
    click.echo("".join(f"{n}\n" for n in notes) + planner.text(p, tuple(modes), from_campaign), nl=False)
    if p.design is None:
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
