"""One merge of [server.args] and a mode's args, seen the same by every consumer: the job script's
srun line, the dry-run summary, the report's flags row and the collector's metrics reading."""
import json
import re
import shlex

import pytest

from slurm_ab.collect.server_metrics import draft_tokens_of
from slurm_ab.model.experiment import Experiment
from slurm_ab.job.render import render_script, summary
from slurm_ab.report.html import _flags
from slurm_ab.model.sources import Sources
from helpers.scripts import plan_for

from helpers.scripts import GOLDEN_SETS, MODES

# A mode whose args override server args (issue 17: the report showed both values).
OVERRIDE = ("server.args.mem-fraction-static=0.83", "mode.args.mem-fraction-static=0.7",
            "server.args.cuda-graph-bs=[1, 2]", "server.args.disable-overlap-schedule=false")
CASES = [(m, ()) for m in MODES] + [("tp32", OVERRIDE), ("tp32-dflash", OVERRIDE)]


def _script_words(script: str) -> list[str]:
    body = script[script.index("SERVER_CMD_0=(\n") + len("SERVER_CMD_0=(\n"):]
    body = body[:body.index("\n)\n")]
    return shlex.split(body)[3:]          # without 'python3 -m sglang.launch_server'


def _summary_words(text: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith("  replica 0 ("))
    cmd = line.split("): ", 1)[1]
    cmd = cmd[:cmd.index(" --dist-init-addr")]
    words = shlex.split(cmd)
    while re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):    # the environment first
        words.pop(0)
    return words[3:]


@pytest.mark.parametrize("mode,sets", CASES, ids=[f"{m}{'+override' if s else ''}" for m, s in CASES])
def test_every_consumer_sees_the_same_flags(mode, sets):
    plan = plan_for(Sources("example", (), GOLDEN_SETS + sets), mode, "RUN-ID")
    exp = plan.exp
    srun = _script_words(render_script(plan))
    dry = _summary_words(summary(plan))
    # the report reads the manifest's config as JSON, like every reader of a stored run
    stored = Experiment.from_dict(json.loads(json.dumps(exp.to_dict())))
    page = shlex.split(_flags(json.loads(json.dumps(exp.to_dict()))))
    assert srun == dry == page
    assert stored.server_flags == exp.server_flags
    # each flag once, with the mode's value winning
    names = [w for w in srun if w.startswith("--")]
    assert len(names) == len(set(names))
    if sets:
        assert srun[srun.index("--mem-fraction-static") + 1] == "0.7"
        assert srun[srun.index("--cuda-graph-bs") + 1: srun.index("--cuda-graph-bs") + 3] == ["1", "2"]
        assert "--disable-overlap-schedule" not in srun and "False" not in srun
    draft = dict(exp.server_flags).get("speculative-num-draft-tokens")
    assert draft_tokens_of(stored) == draft


def test_flags_of_an_old_manifest_without_some_keys():
    """A manifest written before a key existed still gives its flags (unknown keys read as None)."""
    old = {"server_args": [["chunked-prefill-size", 8192], ["disable-radix-cache", True]],
           "mode": {"name": "tp32", "tp": 32, "pp": 1, "ep": 4, "args": [["chunked-prefill-size", 4096]]}}
    exp = Experiment.from_dict(old)
    assert exp.server_flags == (("chunked-prefill-size", 4096), ("disable-radix-cache", True))
    assert exp.benchmark.num_prompts is None
    assert re.search(r"--chunked-prefill-size 4096 --disable-radix-cache$", _flags(old))
