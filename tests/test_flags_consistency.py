"""One merge of the flags per role ([server.args] < the mode's args < the role's < --set), seen the
same by every consumer, role by role: the job script's srun line (SERVER_CMD_<i>_<role>), the
dry-run summary's command of each role instance, the report's flags row of each role, the stored
manifest read back, and the collector's per-role reading (draft tokens, DP ranks). Every built-in
mode (read from the built-in experiment, so a new mode is covered by being added), overrides, and
PD variants: two decodes, a decode with its own --dp-size 2."""
import json
import re
import shlex

import pytest

from slurm_ab.collect.server_metrics import _dp_of, draft_tokens_of
from slurm_ab.model.config import builtin_experiment
from slurm_ab.model.experiment import Experiment
from slurm_ab.job.render import render_script, summary
from slurm_ab.report.html import flag_rows
from slurm_ab.model.sources import Sources
from helpers.scripts import plan_for

from helpers.scripts import GOLDEN_SETS

BUILTIN = tuple(builtin_experiment()["modes"])
# A mode whose args override server args (issue 17: the report showed both values).
OVERRIDE = ("server.args.mem-fraction-static=0.83", "mode.args.mem-fraction-static=0.7",
            "server.args.cuda-graph-bs-decode=[1, 2]", "server.args.disable-overlap-schedule=false")
TWO_DECODES = ("mode.roles.decode.instances=2",)
DECODE_DP = ("mode.roles.decode.args.dp-size=2", "mode.roles.decode.args.enable-dp-attention=true")
CASES = ([(m, ()) for m in BUILTIN] + [("tp32", OVERRIDE), ("tp32-dflash", OVERRIDE)]
         + [("pd-1p1d", TWO_DECODES), ("pd-1p1d", TWO_DECODES + DECODE_DP), ("pd-1p1d-dflash", TWO_DECODES)])


def _ids(case):
    mode, sets = case
    return mode + "".join(f"+{n}" for n, s in (("override", OVERRIDE), ("2d", TWO_DECODES), ("decode-dp2", DECODE_DP))
                          if set(s) <= set(sets))


def _script_words(script: str, role: str) -> list[str]:
    """A role's srun line in the job script, after the program (its environment words first)."""
    name = f"SERVER_CMD_0_{role}=(\n"
    body = script[script.index(name) + len(name):]
    words = shlex.split(body[:body.index("\n)\n")])
    return words[words.index("--model-path"):]


def _summary_words(text: str, component: str) -> list[str]:
    """A role instance's command as the dry-run shows it, without its environment, program and the
    job's run-time words (a prefill's bootstrap port, --dist-init-addr, ...)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"  {component} (het group ") and " (srun " in ln)
    cmd = line.split("): ", 1)[1]
    cmd = re.split(r" --disaggregation-bootstrap-port | --dist-init-addr ", cmd)[0]
    words = shlex.split(cmd)
    return words[words.index("--model-path"):]


def test_every_builtin_mode_is_covered():
    assert {"tp32", "pp8", "tp32-dflash", "pd-1p1d", "pd-1p1d-dflash"} <= set(BUILTIN)
    assert {m for m, _ in CASES} == set(BUILTIN)


@pytest.mark.parametrize("mode,sets", CASES, ids=[_ids(c) for c in CASES])
def test_every_consumer_sees_the_same_flags_role_by_role(mode, sets):
    plan = plan_for(Sources("example", (), GOLDEN_SETS + sets), mode, "RUN-ID")
    exp = plan.exp
    script, dry = render_script(plan), summary(plan)
    # the report reads the manifest's config as JSON, like every reader of a stored run
    cfg = json.loads(json.dumps(exp.to_dict()))
    stored = Experiment.from_dict(cfg)
    rows = dict(flag_rows(stored))
    assert list(rows) == [r.name for r in exp.mode.roles]            # one row per role, in role order
    for role in exp.mode.roles:
        srun = _script_words(script, role.name)
        page = shlex.split(rows[role.name])
        assert srun == page, role.name
        for c in exp.components:                                    # every instance of the role
            if c.role == role.name:
                assert _summary_words(dry, c.name) == srun, c.name
        assert stored.role_flags(role.name) == exp.role_flags(role.name)
        # each flag once, with the most specific table's value
        names = [w for w in srun if w.startswith("--")]
        assert len(names) == len(set(names)), role.name
        flags = dict(exp.role_flags(role.name))
        assert draft_tokens_of(stored, role.name) == flags.get("speculative-num-draft-tokens")
        dp = flags.get("dp-size") if flags.get("enable-dp-attention") else None
        assert _dp_of(stored, role.name) == dp, role.name
    if set(OVERRIDE) <= set(sets):
        srun = _script_words(script, "server")
        assert srun[srun.index("--mem-fraction-static") + 1] == "0.7"
        assert srun[srun.index("--cuda-graph-bs-decode") + 1: srun.index("--cuda-graph-bs-decode") + 3] == ["1", "2"]
        assert "--disable-overlap-schedule" not in srun and "False" not in srun
    if set(TWO_DECODES) <= set(sets):
        assert [c.name for c in exp.components] == ["prefill 0", "decode 0", "decode 1"]
        assert "MODE_NAMES_0=('prefill 0' 'decode 0' 'decode 1')" in script
    if set(DECODE_DP) <= set(sets):                       # DP detection per role: the decode's own
        assert _dp_of(stored, "decode") == 2 and _dp_of(stored, "prefill") is None
        decode = shlex.split(rows["decode"])
        assert decode[decode.index("--dp-size") + 1] == "2" and "--dp-size" not in rows["prefill"]


def test_flags_of_an_old_manifest_without_roles():
    """A manifest written before every mode had roles (or before some keys existed) still gives its
    flags: its mode reads as one server role (unknown keys read as None)."""
    old = {"server_args": [["chunked-prefill-size", 8192], ["disable-radix-cache", True]],
           "mode": {"name": "tp32", "tp": 32, "pp": 1, "ep": 4, "args": [["chunked-prefill-size", 4096]]}}
    exp = Experiment.from_dict(old)
    assert [(r.name, r.tp, r.pp, r.ep) for r in exp.mode.roles] == [("server", 32, 1, 4)]
    assert exp.role_flags("server") == (("chunked-prefill-size", 4096), ("disable-radix-cache", True))
    assert exp.benchmark.num_prompts is None
    ((role, text),) = flag_rows(exp)
    assert role == "server" and re.search(r"--tp-size 32 .*--chunked-prefill-size 4096 --disable-radix-cache$", text)
