"""Client profiles ([client_profiles], benchmark.client) and goodput SLOs (benchmark.slo): what is
validated, what reaches the client's command line, and that the command parses with SGLang
0.5.23's own argparse."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slurm_ab.model.errors import ConfigErrors
from slurm_ab.job.render import summary
from slurm_ab.job.shell import Var
from slurm_ab.model.sources import Sources, load_experiment
from helpers.scripts import plan_for
from slurm_ab.model.validate import notices

from helpers.clients import ENV, client_dir

PASS = {"${PASS_PROMPTS}": "40", "${PASS_C}": "8", "${RUN_DIR}/${PASS_BENCH}": "/r/bench.jsonl",
        "http://${ROUTER_ADDR}:${ROUTER_PORT}": "http://node01:8000"}


def client_argv(*sets, site="example", configs=()) -> list[str]:
    """The client's argv as one pass runs it (the pass's run-time words filled in)."""
    plan = plan_for(Sources(site, configs, ("paths.results=/results",) + sets), "tp32", "R")
    return [PASS[w.text] if isinstance(w, Var) else w for line in plan.client.lines for w in line]


def errors(*sets, site="example") -> list[str]:
    with pytest.raises(ConfigErrors) as e:
        load_experiment(Sources(site, (), sets), "tp32")
    return [str(x) for x in e.value.errors]


def test_default_client_is_0523_steady_state_entry_point():
    argv = client_argv()
    assert argv[:5] == ["python3", "-m", "sglang.benchmark.steady_state_serving",
                        "--steady-state-concurrency-ratio", "0.5"]
    assert "--goodput" not in argv
    plan = plan_for(Sources("example", (), ("paths.results=/results",)), "tp32", "R")
    assert plan.preflight.client_modules == ("sglang.benchmark.steady_state_serving=sglang",)
    # a site whose client import is slow, or checked otherwise, turns ROUTER_HOST's import off
    off = plan_for(Sources("example", (), ("paths.results=/results", "preflight.client_import=false")), "tp32", "R")
    assert off.preflight.client_modules == () and off.preflight.modules == plan.preflight.modules
    assert errors("preflight.client_import=5") == ["preflight.client_import = 5: must be a true/false"]
    assert plan.preflight.client_import_command == ()           # python3 runs it: one import for all


def test_client_side_checks_run_with_the_clients_python():
    venv = "/opt/client-env/bin/python3"
    sets = ("paths.results=/results", f'client_profiles.sglang_0_5_23.command=["env", "-u", "PYTHONPATH", "{venv}", '
            '"-m", "sglang.benchmark.steady_state_serving"]', 'preflight.tokenizer_command=["python3", "-c", "T"]')
    plan = plan_for(Sources("example", (), sets), "tp32", "R")
    pf = plan.preflight
    assert "(+ sglang.benchmark.steady_state_serving=sglang on ROUTER_HOST by env -u PYTHONPATH " \
           f"{venv})" in summary(plan)                        # the dry-run says which Python
    assert pf.client_import_command[:4] == ("env", "-u", "PYTHONPATH", venv)
    assert pf.client_import_command[4:] == pf.import_command[1:]
    assert pf.tokenizer_command == ("env", "-u", "PYTHONPATH", venv, "-c", "T")
    # a client without `-m` (a console script), or a check that is not `PY -c`: as the site wrote it
    other = plan_for(Sources("example", (), ("paths.results=/results",
                                             'client_profiles.sglang_0_5_23.command=["bench-serving"]',
                                             'preflight.tokenizer_command=["check-tok"]')), "tp32", "R").preflight
    assert other.client_import_command == () and other.tokenizer_command == ("check-tok",)


def test_slo_reaches_goodput_only_when_set():
    argv = client_argv("benchmark.slo.ttft_ms=500", "benchmark.slo.e2e_ms=60000.5")
    i = argv.index("--goodput")
    assert argv[i + 1:i + 3] == ["ttft:500", "e2el:60000.5"] and not argv[i + 3].startswith(("ttft", "tpot"))
    exp = load_experiment(Sources("example", (), ("benchmark.slo.tpot_ms=50",)), "tp32")
    assert exp.benchmark.slo_ms == (("tpot", 50.0),) and not any("slo" in n for n in notices(exp))


def test_052_profile_gets_no_goodput_and_says_so():
    sets = ("benchmark.client=\"sglang_0_5_2\"", "benchmark.dataset=\"random-ids\"", "benchmark.slo.ttft_ms=500")
    argv = client_argv(*sets)
    assert argv[:3] == ["python3", "-m", "sglang.bench_serving"] and "--goodput" not in argv
    assert "--steady-state-concurrency-ratio" not in argv
    exp = load_experiment(Sources("example", (), sets), "tp32")
    assert any("has no --goodput; the collector computes goodput" in n for n in notices(exp))


@pytest.mark.parametrize("sets,expect", [
    (("benchmark.client=\"sglang_0_6\"",), ["benchmark.client = 'sglang_0_6'", "unknown client profile",
                                            "sglang_0_5_2, sglang_0_5_23"]),
    (("benchmark.client=\"sglang_0_5_2\"",), ["benchmark.dataset = 'speed-bench'",
                                              "the client of profile sglang_0_5_2 has no loader for it"]),
    (("benchmark.slo.ttft_ms=-5",), ["benchmark.slo.ttft_ms = -5", "not a latency in ms"]),
    (("benchmark.slo.e2e_ms=nan",), ["benchmark.slo.e2e_ms", "not a latency in ms"]),
    (("benchmark.slo.e2e=500",), ["benchmark.slo.e2e", "unknown key", "e2e_ms"]),
    (("client_profiles.x.command=[]", "benchmark.client=\"x\"", "client_profiles.x.module=\"m\""),
     ["client_profiles.x.command", "non-empty list"]),
])
def test_bad_profiles_and_slos_are_refused(sets, expect):
    text = " ".join(errors(*sets))
    assert all(e in text for e in expect), text


def test_052_config_of_the_local_site():
    from helpers.clients import OLD_CONFIG, old_client_dir

    exp = load_experiment(Sources("local", (str(OLD_CONFIG),), ()), "tp32")
    assert exp.client.profile == "sglang_0_5_2" and exp.benchmark.backend == "vllm"
    assert dict(exp.env)["PYTHONPATH"] == str(old_client_dir())
    local = load_experiment(Sources("local", (), ()), "tp32")
    assert local.client.profile == "sglang_0_5_23" and local.benchmark.dataset == "speed-bench"
    assert local.benchmark.backend == "sglang" and local.paths.dataset.endswith("throughput_16k.jsonl")


PARSE = r"""
import json, sys
from sglang.benchmark import serving, steady_state_serving
def capture(args):
    print("ARGS " + json.dumps({k: v for k, v in vars(args).items()
                                if isinstance(v, (str, int, float, bool, list, tuple, type(None)))}))
    sys.exit(0)
serving.run_benchmark = capture
steady_state_serving.cli_main(json.loads(sys.argv[1]))
"""


def test_commands_parse_with_0523s_own_argparse():
    """The rendered client command of the seed's benchmark, with SLOs, through SGLang 0.5.23's
    own parsers (steady_state_serving's, then bench_serving's); nothing runs."""
    argv = client_argv("benchmark.slo.ttft_ms=500", "benchmark.slo.tpot_ms=50", "benchmark.slo.e2e_ms=60000")
    assert argv[:3] == ["python3", "-m", "sglang.benchmark.steady_state_serving"]
    r = subprocess.run([sys.executable, "-c", PARSE, json.dumps(argv[3:])], capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, **ENV, "PYTHONPATH": str(client_dir())})
    line = next((l for l in r.stdout.splitlines() if l.startswith("ARGS ")), None)
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-3000:]
    a = json.loads(line[5:])
    assert a["dataset_name"] == "speed-bench" and a["speed_bench_output_len"] == 512
    assert a["dataset_path"].endswith("throughput_16k.jsonl") and a["backend"] == "sglang"
    assert a["num_prompts"] == 40 and a["max_concurrency"] == 8 and a["warmup_requests"] == 0
    assert a["goodput"] == [["ttft", 500.0], ["tpot", 50.0], ["e2el", 60000.0]]
    assert a["output_details"] is True and a["seed"] == 1
