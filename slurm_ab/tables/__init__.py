"""The one presentation layer of the collector's records: tables in markdown, CSV, JSON and HTML.

    runs      the seed's main row per run (`slurm-ab report`), a run's summary.md, collect's printout
    paired    the seed's paired comparison of two runs (`slurm-ab compare A B`)
    campaign  a job's aggregates, passes, comparisons with intervals, curve, summary.md
    metrics   the server-metrics tables
    table     Table (cells -> md/csv/json/html) and number formatting
Records come from slurm_ab.collect (typed summaries) and collect.rows (numeric rows); nothing here
reads a file or computes a statistic.
"""


def collect_text(cs, passes: bool = False, width: int | None = None, paint=None) -> str:
    """What `collect`, `watch` and `submit --wait` print, its answer line first: a job of one
    pass's row, verdict and reasons; a job of several its launches, aggregates (every pass with
    passes=True) and comparisons; `width`: fitted to a terminal of that many columns."""
    from .campaign import answers, campaign_md, the_pass
    from .runs import run_text

    one = the_pass(cs)
    if one is None:
        return campaign_md(cs, passes=passes, width=width, paint=paint)
    return run_text(one, width, next(iter(answers(cs)), None), paint)
