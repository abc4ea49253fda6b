"""rundir.Layout owns every path of a run directory (issue 29): no file name of a run directory
appears anywhere else in the product (Python or templates: the job script gets its names as the
generated F_* formats), the plan takes the passes' files from it, and each of its pass paths is
pinned by a direct test (issue 36)."""
from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.scripts import GOLDEN_SETS, render
from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
from slurm_ab.job.render import render_script
from slurm_ab.model.campaign import schedule
from slurm_ab.model.rundir import (FILES, OLD_PASS_FILES, RELATIVE, RESUBMITTED, Layout, OldRunLayout,
                                   job_formats)
from slurm_ab.model.sources import Sources

# ---- the grep: no run-directory file name outside Layout ---------------------------------------

_ANY = r"[^\s/]*"


def _file_pattern(path: str) -> re.Pattern:
    """A file of FILES as it would appear in code: its name (its whole path when the name starts
    with a placeholder: 'preflight/{node}.json'), placeholders matching anything."""
    name = path.rsplit("/", 1)[-1]
    parts = re.split(r"\{[a-z_]+\}", path if name.startswith("{") else name)
    return re.compile(r"(?<![\w.-])" + _ANY.join(re.escape(p) for p in parts))


# Directories of FILES: those that hold other entries, and the collector's output folders (their
# files are named by their writers). Every other entry is a file, dot in its name or not
# ("cancel-requested"), and grepped as one; the launch directory has its own pattern below.
OUTPUT_DIRS = {"submitit", "plots"}


def directories(files: dict) -> list[str]:
    parents = {v.split("/")[0] for v in files.values() if "/" in v}
    return [v for v in files.values() if "/" not in v and "{" not in v and (v in parents or v in OUTPUT_DIRS)]


def file_names(files: dict) -> dict[str, re.Pattern]:
    dirs = directories(files)
    return {k: _file_pattern(v) for k, v in files.items() if v not in dirs and k != "launch_dir"}


_DIRS = directories(FILES)
NAMES = {**file_names(FILES), **{"old " + k: _file_pattern(v) for k, v in OLD_PASS_FILES.items()}}
NAMES["a directory"] = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, _DIRS)) + r")/")
NAMES["a launch directory"] = re.compile(r"launch\*-\*|^launch\*$|launch\d+-")
NAMES["a re-submitted run"] = re.compile(r"-job(\*|\d)")
OWNER = ROOT / "slurm_ab" / "model" / "rundir.py"


def _texts(tree: ast.AST):
    """(line, text) of every string of a module but its docstrings; an f-string's expressions as '*'."""
    docs, parts = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
        if isinstance(n, ast.JoinedStr):
            parts |= {id(v) for v in n.values}
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            yield n.lineno, "".join(v.value if isinstance(v, ast.Constant) else "*" for v in n.values)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs | parts:
            yield n.lineno, n.value


def named_files(text: str) -> list[str]:
    return [k for k, r in NAMES.items() if r.search(text)]


def _path_parts(tree: ast.AST):
    """(line, name) of a directory of FILES joined into a path: `x / "logs"`, Path(d, "metrics")."""
    for n in ast.walk(tree):
        args = [n.left, n.right] if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) else \
            n.args if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) in (
                "Path", "PurePath", "join", "joinpath") else []
        yield from ((n.lineno, a.value) for a in args
                    if isinstance(a, ast.Constant) and a.value in _DIRS)


def python_spellings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{_shown(path)}:{line}: {kinds} in {text[:90]!r}"
            for line, text in _texts(tree) if (kinds := named_files(text))] + \
        [f"{_shown(path)}:{line}: a directory in a path: {name!r}" for line, name in _path_parts(tree)]


_SHELL_VAR = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\{\{[^}]*\}\}")


def template_spellings(path: Path) -> list[str]:
    """Lines of code (comments left out) of a template that name a run-directory file."""
    out = []
    text = re.sub(r"\{#.*?#\}", "", path.read_text(), flags=re.S)         # jinja comments
    for no, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*#", line):
            continue
        code = _SHELL_VAR.sub("*", re.sub(r"\s+#\s.*$", "", line))
        if kinds := named_files(code):
            out.append(f"{_shown(path)}:{no}: {kinds} in {code.strip()[:90]!r}")
    return out


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def test_no_file_name_of_a_run_directory_outside_layout():
    found = [x for p in sorted((ROOT / "slurm_ab").rglob("*.py")) if p != OWNER for x in python_spellings(p)]
    found += [x for p in sorted((ROOT / "sbatch_templates").iterdir()) if p.suffix in (".sh", ".j2")
              for x in template_spellings(p)]
    assert not found, "run-directory files named outside rundir.Layout:\n" + "\n".join(found)


@pytest.mark.parametrize("code", [
    'x = "events.log"', 'p = run / "bench-c8-r1.jsonl"', 'f"logs/server-r{g}-n{r}.log"', 'd.glob("launch*")',
    'f"{run_dir.name}-job{job_id}"', 'Path(d, "preflight", f"{node}.json")', '"metrics/ holds files"',
    'open("summary.json")', 'x = "bench.jsonl"', 'f"launch{i}-{mode}"', '"logs/client.log"',
    'run / "metrics"'])
def test_the_grep_sees_a_file_spelled_in_python(tmp_path, code):
    p = tmp_path / "m.py"
    p.write_text(f'"""A docstring may name events.log."""\n{code}\n')
    assert {x.split(":")[1] for x in python_spellings(p)} == {"2"}, code


def test_a_file_without_a_dot_in_its_name_is_grepped_as_a_file():
    """A new entry such as "cancel-requested" (no extension, no children) counts as a file."""
    files = {**FILES, "cancel_requested": "cancel-requested"}
    assert "cancel_requested" in file_names(files) and "cancel-requested" not in directories(files)
    assert file_names(files)["cancel_requested"].search('p = run / "cancel-requested"')
    assert sorted(_DIRS) == ["logs", "metrics", "plots", "preflight", "profiles", "submitit", "telemetry"]


def test_the_grep_sees_a_file_spelled_in_bash_and_not_in_comments(tmp_path):
    p = tmp_path / "t.sh"
    p.write_text('# events.log is named by F_EVENTS\ntail_log "$RUN_DIR/logs/server-r$g-n0.log"  # x\n'
                 'echo "$RUN_DIR/$F_EVENTS"  # events.log\n{# a jinja comment: bench.jsonl #}\n')
    assert [x.split(":")[1] for x in template_spellings(p)] == ["2"]


# ---- the job script: every file from the generated formats -------------------------------------

_RUN_DIR_PATH = re.compile(r'"?\$(?:\{RUN_DIR\}|RUN_DIR)"?/([^\s\'()<>|;"]*)')


def _campaign_text() -> str:
    return render_script(plan_job(Sources("example", (), GOLDEN_SETS), ["tp32", "tp32-dflash"], "RUN-ID",
                                  CampaignOptions(repeats=2, order="blocked")))


def spelled_paths(script: str) -> set[str]:
    """Every $RUN_DIR/... of a job script that is not a generated format (F_*), a variable
    printf'ed from one (`printf -v rel "$F_..."`) or a pass's file (PASS_*, from LAUNCH_PASSES:
    the plan's, below)."""
    formatted = set(re.findall(r'printf -v (\w+) "\$F_', script)) | {"fmt", "PASS_BENCH", "PASS_CLIENT_LOG"}
    out = set()
    for m in _RUN_DIR_PATH.finditer(script):
        lead = re.match(r"\$\{?(\w+)", m.group(1))
        if not (lead and (lead.group(1).startswith("F_") or lead.group(1) in formatted)):
            out.add(m.group(1))
    return out


@pytest.mark.parametrize("sets", [(), ("cluster.address=interface", "cluster.address_interface=ib0")])
def test_the_job_script_spells_no_path_and_gets_layouts_formats(sets):
    for text in (render("tp32-dflash", sets=sets), _campaign_text()):
        assert spelled_paths(text) == set()
        formats = dict(re.findall(r"^(F_[A-Z_]+)=(\S+)", text, re.M))
        assert formats == {name: fmt for name, fmt, _ in job_formats(pd=False, sequential=False, capacity=False,
                                                                     profile=False)}
        assert formats["F_EVENTS"] == str(RELATIVE.events)


def test_a_sequential_campaigns_files_are_generated_formats():
    """The stop rule's spec, program and log reach the script as F_* formats (only a sequential
    campaign's script has them); the spec names each pass's files as Layout does."""
    plan = plan_job(Sources("example", (), GOLDEN_SETS), ["tp32", "tp32-dflash"], "RUN-ID",
                    CampaignOptions(launches=4, sequential=True))
    text = render_script(plan)
    assert spelled_paths(text) == set()
    formats = dict(re.findall(r"^(F_[A-Z_]+)=(\S+)", text, re.M))
    assert formats == {name: fmt for name, fmt, _ in job_formats(pd=False, sequential=True, capacity=False,
                                                                 profile=False)}
    assert (formats["F_SEQ_SPEC"], formats["F_STOP_RULE"], formats["F_STOP_RULE_LOG"]) == \
        (str(RELATIVE.sequential_spec), str(RELATIVE.stop_rule), str(RELATIVE.stop_rule_log))
    spec = json.loads(re.search(r"<<'SLURM_AB_SEQUENTIAL_SPEC'\n(.*?)\nSLURM_AB_SEQUENTIAL_SPEC\n", text, re.S).group(1))
    lay = Layout(Path(plan.run_dir))
    for entry, launch in zip(spec["launches"], plan.campaign.campaign.launches):
        ll = lay.launch(launch)
        assert lay.root / entry["dir"] == ll.root
        assert [(ll.root / x["bench"], ll.root / x["client_log"]) for x in entry["passes"]] == \
            [(ll.bench(p.key), ll.client_log(p.key)) for p in launch.passes if not p.burn_in]


def test_the_formats_give_layouts_names_in_bash(tmp_path):
    """bash's printf of every F_* format names the file Layout names, placeholders in order."""
    args = {"g": "1", "rank": "3", "peer": "2", "dp": "1", "node": "node07", "target": "r1n0", "stamp": "20261130-1.5",
            "job": "42", "run_dir": "/r/x", "mode": "v0524", "prompt": "3", "key": "probe2", "what": "start"}
    by_format = {re.sub(r"\{[a-z_]+\}", "%s", v): v for v in [*FILES.values(), RESUBMITTED]}
    for name, fmt, _ in job_formats():
        pattern = by_format[fmt]
        order = re.findall(r"\{([a-z_]+)\}", pattern)
        out = subprocess.run(["bash", "-c", 'printf "$0" "${@}"', fmt, *(args[k] for k in order)],
                             capture_output=True, text=True, check=True).stdout
        assert out == pattern.format(**args), name
    assert Layout(Path("/r/x")).resubmitted(42) == Path("/r/x-job42")


def test_the_passes_files_come_from_the_layout():
    plan = plan_job(Sources("example", (), GOLDEN_SETS), ["tp32", "tp32-dflash"], "R",
                    CampaignOptions(repeats=2, order="blocked"))
    lay = Layout(Path(plan.run_dir))
    for step, launch in zip(plan.campaign.launches, plan.campaign.campaign.launches):
        ll = lay.launch(launch)
        assert ll.root == lay.root / step.dir
        for ps, p in zip(step.passes, launch.passes):
            assert ll.root / ps.bench == ll.bench(p.key)
            assert ll.root / ps.client_log == ll.client_log(p.key)
    one = plan_job(Sources("example", (), GOLDEN_SETS), ["tp32"], "S")
    (step,) = one.campaign.launches
    assert (step.dir, step.passes[0].bench, step.passes[0].client_log) == \
        ("launch1-tp32", str(RELATIVE.bench("c8-r1")), str(RELATIVE.client_log("c8-r1")))


# ---- every pass path, directly (issue 36: a mutation of a pass path fails here) ------------------

def test_every_pass_path_of_a_launch(tmp_path):
    c = schedule(("tp32", "tp32-dflash"), 2, (1, 8), "blocked", True, 40)
    root = Layout(tmp_path / "run")
    one, two = (root.launch(x) for x in c.launches)
    assert one.root == tmp_path / "run" / "launch1-tp32" and two.root == tmp_path / "run" / "launch2-tp32-dflash"
    assert one.bench("c8-r1") == one.root / "bench-c8-r1.jsonl"
    assert one.client_log("c8-r1") == one.root / "logs" / "client-c8-r1.log"
    assert two.bench("c1-burnin") == two.root / "bench-c1-burnin.jsonl"
    assert two.client_log("c1-r2") == two.root / "logs" / "client-c1-r2.log"
    # every pass of the campaign its own files
    files = [(lay.bench(p.key), lay.client_log(p.key)) for x, lay in zip(c.launches, (one, two)) for p in x.passes]
    assert len({f for pair in files for f in pair}) == 2 * len(files) == 2 * 10
    for bench, client in files:
        bench.parent.mkdir(parents=True, exist_ok=True)
        client.parent.mkdir(parents=True, exist_ok=True)
        bench.write_text("{}\n")
        client.write_text("x\n")
    assert one.pass_files() == sorted(one.root.glob("bench-*")) + sorted(one.logs.glob("client-*"))
    assert len(one.pass_files()) == 2 * 5


def test_every_pass_path_of_an_old_run_directory(tmp_path):
    """A run directory from before launch directories: its one pass's files in the directory."""
    old = OldRunLayout(tmp_path)
    launch = schedule(("tp32",), 1, (8,), "blocked", False, 40).launches[0]
    assert old.launch(launch) is old
    assert old.bench("c8-r1") == tmp_path / "bench.jsonl" and old.client_log("c8-r1") == tmp_path / "logs" / "client.log"
    assert old.bench("any-key") == old.bench("c8-r1")


def test_layout_parses_the_names_it_gives(tmp_path):
    lay = Layout(tmp_path)
    for g, r in ((0, 0), (1, 3), (12, 7)):
        p = lay.server_log(g, r)
        p.parent.mkdir(exist_ok=True)
        p.write_text("")
    (lay.logs / "server-rX-n0.log").write_text("")
    assert lay.server_log_map() == {0: {0: lay.server_log(0, 0)}, 1: {3: lay.server_log(1, 3)},
                                    12: {7: lay.server_log(12, 7)}}
    assert lay.head_logs() == {0: lay.server_log(0, 0)}
    assert lay.slurm_out(42).name == "slurm-42.out" and lay.warmup_response(1).name == "warmup-r1.json"
