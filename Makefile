# slurm-ab: everyday entry points. MODE, SITE, RUN_ID, JOBID, SET are passed through.
PY      ?= python3
MODE    ?= tp32
SITE    ?= local
LOCAL   ?= /var/lib/slurm-ab-local
SET     ?=
SETARGS  = $(foreach s,$(SET),--set $(s))
SLURM_AB = $(PY) -m slurm_ab

.PHONY: help setup install local-assets cluster-up cluster-down cluster-status test test-fast \
        dry-run render submit collect report compare demo bench-collect

help:
	@echo "make setup                     install system packages (Slurm, munge, MariaDB, shellcheck) and Python deps"
	@echo "make cluster-up | cluster-down start/stop the local 9-node Slurm cluster"
	@echo "make demo                      run the three modes on the local cluster and print the tables"
	@echo "make dry-run MODE=tp32         print the job script (SITE=example|local|FILE)"
	@echo "make submit MODE=tp32          submit one run (add WAIT=1 to follow it)"
	@echo "make collect JOBID=123         collect a finished run into tables"
	@echo "make test                      run the tests"

setup:
	bash slurm_ab/cluster/cluster.sh install
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[local,test]'
	# The real benchmark client: sglang 0.5.2 imports without torch; its GPU deps are not needed.
	$(PY) -m pip install -q --no-deps 'sglang==0.5.2'

install:
	$(PY) -m pip install -e .

# Tokenizer-only model directories for the local site (generated, no download).
local-assets:
	$(PY) -m slurm_ab.emulator.make_model $(LOCAL)/models/Kimi-K3
	$(PY) -m slurm_ab.emulator.make_model $(LOCAL)/models/Kimi-K3-DFlash

cluster-up: local-assets
	bash slurm_ab/cluster/cluster.sh up

cluster-down:
	bash slurm_ab/cluster/cluster.sh down

cluster-status:
	bash slurm_ab/cluster/cluster.sh status

test:
	$(PY) -m pytest -q -ra

test-fast:
	$(PY) -m pytest -q -m 'not slow and not cluster'

dry-run:
	$(SLURM_AB) dry-run $(MODE) --site $(SITE) $(SETARGS)

render:
	$(SLURM_AB) render $(MODE) --site $(SITE) $(SETARGS) -o $(or $(OUT),job-$(MODE).sbatch)

submit:
	$(SLURM_AB) submit $(MODE) --site $(SITE) $(SETARGS) $(if $(RUN_ID),--run-id $(RUN_ID)) $(if $(WAIT),--wait)

collect:
	$(SLURM_AB) collect $(JOBID)

report:
	$(SLURM_AB) report

compare:
	$(SLURM_AB) compare $(A) $(B)

demo:
	bash scripts/demo.sh

bench-collect:
	$(PY) benchmarks/bench_collect.py
