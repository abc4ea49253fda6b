"""Every invalid input gives an error naming the key, the value and what is allowed; exit 2; nothing written."""
import pytest

from slurm_ab.model.errors import ConfigError, ConfigErrors
from slurm_ab.model.sources import Sources, load_experiment
from helpers.scripts import plan_for


def errors_of(mode="tp32", sets=(), site="example", configs=()):
    with pytest.raises((ConfigErrors, ConfigError)) as exc:
        plan_for(Sources(site, tuple(configs), tuple(sets)), mode, "RUN")
    e = exc.value
    return [str(x) for x in (e.errors if isinstance(e, ConfigErrors) else [e])]


def one_error(*a, **kw):
    errs = errors_of(*a, **kw)
    assert len(errs) == 1, errs
    return errs[0]


CASES = [
    # (mode, sets, expected substrings)
    ("tp64", [], ["mode = 'tp64'", "unknown mode", "pp8, tp32, tp32-dflash"]),
    ("tp32", ["benchmark.num_promts=20"], ["benchmark.num_promts", "unknown key", "did you mean benchmark.num_prompts"]),
    ("tp32", ["cluster.partiton=x"], ["cluster.partiton", "did you mean cluster.partition"]),
    ("tp32", ["modes.tp32.tp=16"], ["modes.tp32.tp = 16", "TP x PP = 16 x 1 = 16 must equal", "4 x 8 = 32"]),
    ("tp32", ["cluster.gpus_per_node=4"], ["modes.tp32.tp = 32", "must equal", "4 x 4 = 16"]),
    ("tp32", ["modes.tp32.ep=5"], ["modes.tp32.ep = 5", "divisible by EP", "a divisor of 32"]),
    ("pp8", ["mode.args.speculative-algorithm=\"DFLASH\"", "mode.args.speculative-draft-model-path=\"/d\""],
     ["modes.pp8.pp = 8", "DFLASH", "pp_size == 1"]),
    ("tp32-dflash", ["paths.draft_model=\"\""], ["paths.draft_model = ''", "missing required site value"]),
    ("tp32-dflash", ["mode.args.speculative-draft-model-path=\"\""],
     ["speculative-draft-model-path = ''", "needs a draft model"]),
    ("tp32-dflash", ["mode.args.mem-fraction-static=1.2"], ["mem-fraction-static = 1.2", "strictly between 0 and 1"]),
    ("tp32-dflash", ["mode.args.mem-fraction-static=0"], ["mem-fraction-static = 0", "strictly between 0 and 1"]),
    ("tp32", ["benchmark.concurrency=0"], ["benchmark.concurrency = 0", "must be >= 1"]),
    ("tp32", ["benchmark.num_prompts=-3"], ["benchmark.num_prompts = -3", "must be >= 1"]),
    ("tp32", ["experiment.replicas=1"], ["experiment.replicas = 1", "must be >= 2", "not heterogeneous"]),
    ("tp32", ["model.context_length=16500"], ["benchmark.input_len = 16384", "16896 tokens exceeds the context length 16500"]),
    ("tp32", ["paths.model=\"\""], ["paths.model = ''", "missing required site value", "set it in the site file"]),
    ("tp32", ["cluster.partition=\"\""], ["cluster.partition = ''", "missing required site value"]),
    ("tp32", ["benchmark.concurrency=\"eight\""], ["benchmark.concurrency = 'eight'", "must be a integer"]),
    ("tp32", ["mode.args.pp=2"], ["modes.tp32.args.pp", "ambiguous", "pp-size"]),
    ("tp32", ["server.args.tp-size=8"], ["server.args.tp-size", "set by slurm-ab", "modes.tp32.tp"]),
    ("tp32", ["server.args.--x=1"], ["server.args.--x", "flag name"]),
    ("tp32", ["env.1BAD=x"], ["env.1BAD", "not a valid environment variable name"]),
    ("tp32", ["cluster.gpu_request=\"gpus\""], ["cluster.gpu_request = 'gpus'", "gpus-per-node, gres, none"]),
    ("tp32", ["cluster.time_limit=\"2 hours\""], ["cluster.time_limit = '2 hours'", "not a Slurm time"]),
    ("tp32", ["cluster.partition=\"gpu; rm -rf /\""], ["cluster.partition", "#SBATCH line"]),
    ("tp32", ["cluster.sbatch_extra=[\"--qos=a b\"]"], ["cluster.sbatch_extra[0]", "not a single sbatch option"]),
    ("tp32", ["ports.router=30005"], ["overlaps"]),
    ("tp32", ["ports.server=65000"], ["ports.server = 65000", "passes 65535"]),
    ("tp32", ["benchmark.dataset=\"sharegpt\""], ["benchmark.dataset = 'sharegpt'", "unknown dataset", "random-ids"]),
    ("tp32", ["paths.results=\"/my results\""], ["paths.results = '/my results'", "#SBATCH"]),
    ("tp32", ["modes.new.tp=32", "modes.new.pp=1", "modes.new.epp=4"], None),  # checked below
    # site settings of real clusters (issue 10)
    ("tp32", ["cluster.mem=\"lots\""], ["cluster.mem = 'lots'", "not an sbatch --mem size", "\"0\" (all of each node)"]),
    ("tp32", ["cluster.server_cpu_bind=\"none; id\""], ["cluster.server_cpu_bind", "--cpu-bind"]),
    ("tp32", ["cluster.side_step_args=[\"--gres=none --mem=0\"]"], ["cluster.side_step_args[0]", "single srun option"]),
    ("tp32", ["cluster.address=\"dns\""], ["cluster.address = 'dns'", "name, nodeaddr, interface"]),
    ("tp32", ["cluster.address=\"interface\""], ["cluster.address_interface = ''", "not a network interface name", "ib0"]),
    ("tp32", ["cluster.address=\"interface\"", "cluster.address_interface=\"ib0\"", "preflight.enabled=false"],
     ["cluster.address = 'interface'", "read on each node by the preflight", "preflight.enabled = true"]),
    ("tp32", ["router.profile=\"sglang-router\""], ["router.profile = 'sglang-router'", "unknown router profile", "sglang_router, smg"]),
    ("tp32", ["router_profiles.smg.modul=\"x\""], ["router_profiles.smg.modul", "unknown key", "did you mean module"]),
    ("tp32", ["router.profile=\"smg\"", "router_profiles.smg.ready_path=\"readiness\""],
     ["router_profiles.smg.ready_path = 'readiness'", "not an HTTP path"]),
    ("tp32", ["preflight.server_module=\"sglang; rm\""], ["preflight.server_module", "not a Python module name"]),
    ("tp32", ["commands.router=[\"x\"]"], ["commands.router", "unknown key"]),
]


@pytest.mark.parametrize("mode,sets,expected", [c for c in CASES if c[2]])
def test_error_names_key_value_and_allowed(mode, sets, expected):
    msg = one_error(mode, sets)
    for part in expected:
        assert part in msg, msg


def test_unknown_mode_key_suggests():
    msg = one_error("tp32", ["modes.new.tp=32", "modes.new.pp=1", "modes.new.epp=4"])
    assert "modes.new.epp = 4: unknown key" in msg and "did you mean" in msg


def test_all_errors_reported_together():
    errs = errors_of("tp32", ["benchmark.concurrency=0", "benchmark.num_prompts=0"])
    assert len(errs) == 2


def test_dflash_on_pp_mode_via_config_file(tmp_path):
    cfg = tmp_path / "x.toml"
    cfg.write_text('[modes.pp8.args]\nspeculative-algorithm = "DFLASH"\nspeculative-draft-model-path = "{paths.draft_model}"\n')
    msg = one_error("pp8", configs=[str(cfg)])
    assert "only supports pp_size == 1" in msg


def test_bad_toml_file(tmp_path):
    cfg = tmp_path / "x.toml"
    cfg.write_text("[benchmark\n")
    assert "not valid TOML" in one_error("tp32", configs=[str(cfg)])


def test_unknown_site_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_AB_SITES", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    msg = one_error("tp32", site="nowhere")
    assert "--site = 'nowhere'" in msg and "built-in example" in msg
    assert f"$SLURM_AB_SITES ({tmp_path / 'a'}, {tmp_path / 'b'})" in msg
    monkeypatch.delenv("SLURM_AB_SITES")
    assert "$SLURM_AB_SITES (none, it is unset)" in one_error("tp32", site="nowhere")


def test_named_sites_come_from_slurm_ab_sites_dirs_in_order(tmp_path, monkeypatch):
    """A cluster's shared site files (and the testbed's `local`) are found by name, first dir first."""
    from slurm_ab.model.config import site_text

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "mine.toml").write_text("# a\n")
    (tmp_path / "b" / "mine.toml").write_text("# b\n")
    (tmp_path / "b" / "example.toml").write_text("# not the built-in\n")
    monkeypatch.setenv("SLURM_AB_SITES", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert site_text("mine") == ("# a\n", str(tmp_path / "a" / "mine.toml"))
    assert site_text("example")[1] == "built-in site 'example'"


def test_unknown_reference():
    msg = one_error("tp32-dflash", ["mode.args.speculative-draft-model-path=\"{paths.draft}\""])
    assert "unknown key 'paths.draft'" in msg


def test_other_modes_missing_values_do_not_block():
    exp = load_experiment(Sources("example", (), ("paths.draft_model=\"\"",)), "tp32")
    assert exp.mode.role("server").tp == 32


@pytest.mark.parametrize("run_id", ["../x", "a/b", "", "-x", "a b", "x" * 101, "a..b"])
def test_bad_run_ids(run_id):
    with pytest.raises(ConfigError) as e:
        plan_for(Sources("example"), "tp32", run_id)
    assert "run id" in str(e.value)


def test_set_mode_shorthand():
    exp = load_experiment(Sources("example", (), ("mode.args.mem-fraction-static=0.86",)), "tp32-dflash")
    assert dict(exp.mode.args)["mem-fraction-static"] == 0.86
