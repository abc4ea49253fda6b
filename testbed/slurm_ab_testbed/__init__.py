"""The slurm-ab testbed: what the tests and ``make demo`` run against, never shipped to users.

``emulator`` stands in for SGLang's engine (``python3 -m slurm_ab_testbed.emulator``), ``make_model``
writes tokenizer-only model directories for it, ``cluster`` + ``cluster.sh`` run the local 9-node
Slurm cluster, and ``testing`` holds the emulator's subprocess helpers for tests. It imports nothing
of slurm_ab: the two meet only through the site file (``testbed/sites/local.toml``) and the job's
command lines.
"""
