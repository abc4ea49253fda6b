"""The product's import graph (slurm_ab.*) has no cycle; lazy imports inside functions count too."""
import ast
from pathlib import Path

from helpers import ROOT


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports (anywhere in its code).

    'from pkg import sub' points at pkg.sub when that is a module, else at pkg. A module is not
    taken to import the packages that contain it (Python loads them first, that is no cycle).
    """
    files = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".")
                    base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in files else src
                           for a in node.names]
            for t in targets:
                while t and t not in files:      # 'import slurm_ab.x.y' -> nearest module
                    t = t.rpartition(".")[0]
                if t and t != mod and t.split(".")[0] == package:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_product_has_no_import_cycle():
    graph = import_graph(ROOT, "slurm_ab")
    assert "slurm_ab.model.rundir" in graph and "slurm_ab.collect.campaign" in graph
    assert "slurm_ab.model.rundir" in graph["slurm_ab.collect.campaign"]      # the walk sees imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_product_does_not_import_the_testbed():
    graph_src = [p.read_text() for p in (ROOT / "slurm_ab").rglob("*.py")]
    assert not any("slurm_ab_testbed" in text for text in graph_src)


def test_the_walk_finds_a_lazy_cycle(tmp_path):
    # the cycle this test guards against: rundir imported collect.locate inside a function,
    # collect.locate imported rundir at the top
    pkg = tmp_path / "p"
    (pkg / "collect").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rundir.py").write_text("def find():\n    from .collect.locate import find_run_dirs\n")
    (pkg / "collect" / "__init__.py").write_text("from .locate import find_run_dirs\n")
    (pkg / "collect" / "locate.py").write_text("from ..rundir import read_manifest\n")
    cycle = find_cycle(import_graph(tmp_path, "p"))
    assert cycle == ["p.collect.locate", "p.rundir", "p.collect.locate"]
    (pkg / "rundir.py").write_text("import json\n")
    assert find_cycle(import_graph(tmp_path, "p")) is None


# The stages, top to bottom: a command (cli) draws pages (report) or runs a job (job); both read
# records (tables <- collect <- parse) whose statistics come from ab_stats; everything stands on the
# model (what to run, where its files live). A module imports only its own stage or lower ones.
STAGES = ("cli", "report", "job", "tables", "collect", "ab_stats", "model", "parse")
# Imports that still run upward, each a seam to remove (docs/design.md), never to add to.
KNOWN_UPWARD: set[tuple[str, str]] = {
    ("slurm_ab.collect.run", "slurm_ab.report"),               # the collector draws the page
    ("slurm_ab.collect.write", "slurm_ab.tables.campaign"),    # ... and writes its tables
    ("slurm_ab.collect.write", "slurm_ab.tables.table"),
    ("slurm_ab.parse.diagnose", "slurm_ab.model.rundir"),      # a parser that knows the run directory
}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in STAGES else None


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, t) for m, targets in graph.items() for t in targets
            if _stage(m) and _stage(t) and STAGES.index(_stage(t)) < STAGES.index(_stage(m))}


def test_every_module_lives_in_a_stage():
    graph = import_graph(ROOT, "slurm_ab")
    loose = sorted(m for m in graph if m.count(".") == 1 and m not in ("slurm_ab.__main__",)
                   and m.split(".")[1] not in STAGES + ("data", "sbatch_templates"))
    assert loose == []


def test_no_stage_imports_a_higher_one():
    up = upward_imports(import_graph(ROOT, "slurm_ab"))
    assert up - KNOWN_UPWARD == set(), "new upward imports: " + ", ".join(f"{a} -> {b}" for a, b in sorted(up - KNOWN_UPWARD))
    assert KNOWN_UPWARD - up == set(), "seams removed: drop them from KNOWN_UPWARD"


def test_the_stage_check_sees_an_upward_import():
    graph = {"slurm_ab.parse.x": {"slurm_ab.model.rundir"}, "slurm_ab.job.plan": {"slurm_ab.model.rundir"}}
    assert upward_imports(graph) == {("slurm_ab.parse.x", "slurm_ab.model.rundir")}
