"""Config fuzzing: random keys and values for every field give a validation error naming the key,
or a valid script; never a traceback, and never a written or submitted script on error."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ab.model.config import builtin_experiment
from slurm_ab.model.errors import ConfigError, ConfigErrors
from slurm_ab.model.sources import Sources
from helpers.scripts import plan_for
from slurm_ab.job.render import render_script


def _leaf_keys(tree, prefix=""):
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v:
            yield from _leaf_keys(v, key)
        else:
            yield key


KEYS = sorted(_leaf_keys(builtin_experiment()))
toml_values = st.one_of(
    st.integers(min_value=-10**6, max_value=10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.booleans().map(lambda b: "true" if b else "false"),
    st.text(max_size=30).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'),
    st.lists(st.text(alphabet="abc -=$;'", max_size=8), max_size=3).map(
        lambda xs: "[" + ", ".join('"' + x.replace("'", "") + '"' for x in xs) + "]"),
    st.text(max_size=20),  # raw, possibly not TOML at all
)
keys = st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS).map(lambda k: k + "x"),
                 st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-", min_size=1, max_size=25))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["tp32", "pp8", "tp32-dflash", "nope"]),
       sets=st.lists(st.tuples(keys, toml_values), min_size=1, max_size=3))
def test_random_sets_never_traceback(mode, sets):
    items = tuple(f"{k}={v}" for k, v in sets)
    try:
        plan = plan_for(Sources("example", (), items), mode, "FUZZ")
    except ConfigErrors as e:
        assert e.errors and all(str(x) and " = " in str(x) for x in e.errors)
        return
    except ConfigError as e:
        assert " = " in str(e)
        return
    text = render_script(plan)  # a valid config must render
    assert text.startswith("#!/bin/bash\n")


@settings(max_examples=150, deadline=None)
@given(body=st.text(max_size=200))
def test_random_config_files_never_traceback(tmp_path_factory, body):
    cfg = tmp_path_factory.mktemp("fz") / "x.toml"
    cfg.write_text(body)
    try:
        plan = plan_for(Sources("example", (str(cfg),), ()), "tp32", "FUZZ")
    except ConfigErrors as e:
        assert e.errors and all(" = " in str(x) for x in e.errors)          # each names its key and value
        return
    except ConfigError as e:
        assert " = " in str(e)                                              # not TOML: the file named
        return
    assert render_script(plan).startswith("#!/bin/bash\n")                 # (an empty file, a comment)


def test_fuzzed_cli_writes_nothing(cli, tmp_path):
    code, _, err = cli("submit", "tp32", "--set", "modes.tp32.tp=3", "--set", "paths.model=12")
    assert code == 2 and "modes.tp32.tp = 3" in err
    assert list(tmp_path.iterdir()) == []


def test_set_numbers_into_string_keys_are_strings():
    plan = plan_for(Sources("example", (), ("cluster.account=12345", "env.NCCL_IB_GID_INDEX=3")), "tp32", "X")
    assert plan.exp.cluster.account == "12345"
    assert ("NCCL_IB_GID_INDEX", "3") in plan.exp.env
