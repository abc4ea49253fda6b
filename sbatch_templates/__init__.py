"""Jinja2 templates of the generated job scripts (a package so that they install with slurm-ab)."""
