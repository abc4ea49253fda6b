"""slurm-ab: generate, submit, watch and collect A/B benchmarks of LLM serving on Slurm."""

__version__ = "0.1.0"
