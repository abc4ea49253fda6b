# slurm-ab: everyday entry points. MODE, SITE, RUN_ID, JOBID, SET are passed through.
PY      ?= python3
MODE    ?= tp32
SITE    ?= local
LOCAL   ?= /var/lib/slurm-ab-local
SET     ?=
SETARGS  = $(foreach s,$(SET),--set $(s))
SLURM_AB = $(PY) -m slurm_ab
CLUSTER  = bash testbed/slurm_ab_testbed/cluster.sh
# 27 emulated nodes: three lanes of 9 (partitions lane1..lane3), so that `make test` runs three
# seed-shaped jobs side by side; the demo and users' runs take the partition gpu (all of them).
CLUSTER_NODES ?= 27
SETUP_STAMP = build/setup.stamp
# The real benchmark client of the local site (client profile sglang_0_5_23), and the older one
# kept beside it for the profile sglang_0_5_2 (testbed/configs/client-sglang-0.5.2.toml): each in a
# directory of its own that the site's (or the config's) [env] PYTHONPATH names, as a client
# environment apart from the router's (testbed/sites/local.toml says why).
SGLANG_CLIENT = 0.5.23
CLIENT = $(LOCAL)/clients/sglang-$(SGLANG_CLIENT)
OLD_CLIENT = $(LOCAL)/clients/sglang-0.5.2
# ... and the Python environment 0.5.2's client runs in (testbed/configs/client-sglang-0.5.2.toml):
# a venv with what its bench_serving imports, at this machine's versions (both clients tokenize
# alike), and no torch. 0.5.2's bench_serving does not use torch, but transformers imports it
# whenever it is installed: 3 of the 6 s of CPU each client start costs here.
OLD_CLIENT_ENV = $(LOCAL)/clients/sglang-0.5.2-env
OLD_CLIENT_PACKAGES = transformers tokenizers huggingface_hub aiohttp numpy requests tqdm ipython pillow pybase64
# NAME==VERSION of each at this machine's versions; the venv's stamp holds them: a change rebuilds it
OLD_CLIENT_PINS = $(PY) -c 'import importlib.metadata as m, sys; print(*(f"{p}=={m.version(p)}" for p in sys.argv[1:]))' \
  $(OLD_CLIENT_PACKAGES)
SPEED_BENCH = $(LOCAL)/datasets/speed-bench/throughput_16k.jsonl
# A Mooncake-format trace for bench_serving's --dataset-name mooncake (docs/testbed.md)
MOONCAKE_TRACE = $(LOCAL)/datasets/mooncake/mooncake_trace.jsonl
# Debian packages the tests use besides the cluster's (cluster.sh install; shellcheck is there):
# chromium renders the HTML reports headless.
APT_TEST_TOOLS = chromium locales

# Python writes its bytecode caches here even where the environment says not to (some images set
# PYTHONDONTWRITEBYTECODE=1): without them every CLI call, emulator and job step recompiles slurm-ab
# from source (~0.3 s of CPU each) and every pytest worker re-rewrites every test module.
unexport PYTHONDONTWRITEBYTECODE

# The `local` site belongs to the testbed, not to slurm-ab: tell the site loader where it lives.
TESTBED_SITES := $(CURDIR)/testbed/sites
export SLURM_AB_SITES := $(if $(findstring $(TESTBED_SITES),$(SLURM_AB_SITES)),$(SLURM_AB_SITES),$(TESTBED_SITES)$(if $(SLURM_AB_SITES),:$(SLURM_AB_SITES)))

.PHONY: help setup install local-assets cluster-up cluster-down cluster-status test test-fast \
        dry-run render submit ab collect report compare demo bench-collect

help:
	@echo "make setup                     install system packages (Slurm, munge, MariaDB, shellcheck, chromium),"
	@echo "                               slurm-ab and the testbed (emulator, local cluster); a quick no-op when done"
	@echo "make cluster-up                start the local Slurm cluster, 27 nodes in 3 lanes"
	@echo "                               (SLURM_AB_CLUSTER_NET=netns|localhost picks its network layout)"
	@echo "make cluster-status            its daemons, nodes and network layout"
	@echo "make cluster-down              stop it"
	@echo "make demo                      run the three modes on the local cluster and print the tables"
	@echo "make dry-run MODE=tp32         print the job script (SITE=example|local|FILE)"
	@echo "make submit MODE=tp32          submit one run (add WAIT=1 to follow it)"
	@echo "make ab A=tp32 B=tp32-dflash REPEATS=3   one-allocation A/B campaign with 95% intervals"
	@echo "                               (CONCURRENCY=1,8 ORDER=interleaved BURN_IN=1 WAIT=1)"
	@echo "make collect JOBID=123         collect a finished run into tables"
	@echo "make test                      setup + cluster-up if needed, then every test (test-fast: no cluster)"

# Idempotent and fast when done: testbed/setup_check.py looks (in ~0.1 s) for the tools and for
# slurm_ab + slurm_ab_testbed installed from this checkout; the stamp is redone when a pyproject changes.
setup:
	@$(PY) testbed/setup_check.py || rm -f $(SETUP_STAMP)
	@$(MAKE) --no-print-directory $(SETUP_STAMP)

$(SETUP_STAMP): pyproject.toml testbed/pyproject.toml
	$(CLUSTER) install
	@missing=$$(for p in $(APT_TEST_TOOLS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
	  | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "setup: apt-get install $$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; fi
	$(PY) -m pip install -q -e '.[test]' -e ./testbed
	@# a comma-decimal locale for the job script's locale tests (tests/test_bash_portability.py)
	@locale -a 2>/dev/null | grep -qx 'de_DE.utf8' || localedef -i de_DE -c -f UTF-8 de_DE.UTF-8
	@$(PY) testbed/setup_check.py
	@mkdir -p $(@D) && touch $@

install:
	$(PY) -m pip install -e .

# Tokenizer-only model directories for the local site and a SPEED-Bench JSONL of ~16K-token prompts
# in their words (generated, no download); the two clients (SGLang 0.5.23's and 0.5.2's
# bench_serving, without their GPU dependencies: what 0.5.23 imports comes with the testbed).
local-assets: setup
	$(PY) -m slurm_ab_testbed.make_model $(LOCAL)/models/Kimi-K3
	$(PY) -m slurm_ab_testbed.make_model $(LOCAL)/models/Kimi-K3-DFlash
	@pins=$$($(OLD_CLIENT_PINS)); [ "$$(cat $(OLD_CLIENT_ENV)/installed 2>/dev/null)" = "$$pins" ] \
	  || rm -f $(OLD_CLIENT_ENV)/installed
	@$(MAKE) --no-print-directory $(SPEED_BENCH) $(MOONCAKE_TRACE) $(CLIENT)/sglang/version.py $(OLD_CLIENT)/sglang/version.py \
	  $(OLD_CLIENT_ENV)/installed

$(SPEED_BENCH): testbed/slurm_ab_testbed/make_speed_bench.py testbed/slurm_ab_testbed/make_model.py
	$(PY) -m slurm_ab_testbed.make_speed_bench $@ --model $(LOCAL)/models/Kimi-K3
	@touch $@

$(MOONCAKE_TRACE): testbed/slurm_ab_testbed/make_mooncake_trace.py testbed/slurm_ab_testbed/make_model.py
	$(PY) -m slurm_ab_testbed.make_mooncake_trace $@
	@touch $@

$(CLIENT)/sglang/version.py:
	$(PY) -m pip install -q --no-deps --target $(CLIENT) 'sglang==$(SGLANG_CLIENT)'

$(OLD_CLIENT)/sglang/version.py:
	$(PY) -m pip install -q --no-deps --target $(OLD_CLIENT) 'sglang==0.5.2'

$(OLD_CLIENT_ENV)/installed:
	rm -rf $(OLD_CLIENT_ENV)
	$(PY) -m venv $(OLD_CLIENT_ENV)
	pins=$$($(OLD_CLIENT_PINS)) && $(OLD_CLIENT_ENV)/bin/python3 -m pip install -q $$pins && echo "$$pins" >$@

cluster-up: local-assets
	SLURM_AB_CLUSTER_NODES=$(CLUSTER_NODES) $(CLUSTER) up

cluster-down:
	$(CLUSTER) down

cluster-status:
	$(CLUSTER) status

# The README's test command: on a fresh machine it installs, starts the cluster, then tests. The
# cluster tests: one pytest-xdist worker per lane of the cluster, a test file per worker at a time
# (tests/helpers/lanes.py; in conftest.py's order, the longest first: xdist's own reorder puts the
# files with most tests first). Beside them, one pytest process runs the tests that need no cluster
# (they used to take ~200 s of each lane worker's time; the cores idle ~12 % of a run while every
# lane waits on Slurm, on a grace period or a timeout). Then the `exclusive` tests (they take the
# whole cluster down and up) alone. Every part always runs; the 30 longest cluster tests and the 15
# longest others are listed (where the suite's time goes, issue 17). In every part a test that passes
# without running an assertion fails (tests/helpers/asserted.py, from tests/conftest.py).
LOCAL_TESTS_LOG = build/test-local.log
test: setup cluster-up
	@lanes=$$(sinfo -h -o %R | grep -c '^lane[0-9]'); \
	echo "test: $$lanes lane(s) of 9 nodes: $$lanes worker(s) for the cluster tests, one process beside them for the others"; \
	mkdir -p build; \
	$(PY) -m pytest -q -ra -p no:cacheprovider -p no:xdist --durations=15 --basetemp=/tmp/slurm-ab-tests-local \
	  -m 'not cluster and not exclusive' >$(LOCAL_TESTS_LOG) 2>&1 & l=$$!; \
	$(PY) -m pytest -q -ra -p no:cacheprovider --durations=30 -n "$$lanes" --dist loadfile --no-loadscope-reorder \
	  -m 'cluster and not exclusive'; a=$$?; \
	wait $$l; c=$$?; echo "test: the tests that need no cluster (run beside the cluster tests, $(LOCAL_TESTS_LOG)):"; \
	cat $(LOCAL_TESTS_LOG); \
	$(PY) -m pytest -q -ra -p no:cacheprovider -m exclusive; b=$$?; \
	exit $$((a ? a : c ? c : b))

test-fast: local-assets
	$(PY) -m pytest -q -m 'not slow and not cluster'

dry-run:
	$(SLURM_AB) dry-run $(MODE) --site $(SITE) $(SETARGS)

render:
	$(SLURM_AB) render $(MODE) --site $(SITE) $(SETARGS) -o $(or $(OUT),job-$(MODE).sbatch)

submit:
	$(SLURM_AB) submit $(MODE) --site $(SITE) $(SETARGS) $(if $(RUN_ID),--run-id $(RUN_ID)) $(if $(WAIT),--wait)

# A/B campaign: both modes in turn in one allocation, REPEATS passes each, compared with intervals.
ab:
	$(SLURM_AB) submit $(A) $(B) --site $(SITE) $(SETARGS) $(if $(REPEATS),--repeats $(REPEATS)) \
	  $(if $(CONCURRENCY),--concurrency $(CONCURRENCY)) $(if $(ORDER),--order $(ORDER)) \
	  $(if $(BURN_IN),--burn-in) $(if $(RUN_ID),--run-id $(RUN_ID)) $(if $(WAIT),--wait)

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
