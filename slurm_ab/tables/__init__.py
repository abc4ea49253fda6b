"""The one presentation layer of the collector's records: tables in markdown, CSV, JSON and HTML.

    runs      the seed's main row per run (`slurm-ab report`), a run's summary.md, collect's printout
    paired    the seed's paired comparison of two runs (`slurm-ab compare A B`)
    campaign  a campaign's aggregates, passes, comparisons with intervals, curve, summary.md
    metrics   the server-metrics tables
    table     Table (cells -> md/csv/json/html) and number formatting
Records come from slurm_ab.collect (typed summaries) and collect.rows (numeric rows); nothing here
reads a file or computes a statistic.
"""


def collect_text(cs, passes: bool = False) -> str:
    """What `collect`, `watch` and `submit --wait` print: a run's row, verdict and reasons, or a
    campaign's launches, aggregates (every pass with passes=True) and comparisons."""
    if cs.single:
        from .runs import run_text
        return run_text(cs.only)
    from ..collect.rows import campaign_record
    from .campaign import campaign_md
    return campaign_md(campaign_record(cs), passes=passes)
