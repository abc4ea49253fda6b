"""The dead-code check of `make test` (tests/test_dead_code.py): product functions, methods,
properties and classes of slurm_ab/ that nothing but tests reaches.

vulture (a test extra) reads the product, its other callers (benchmarks/, the job templates'
attribute names) and the whitelist (tests/dead_code_whitelist.py: names it cannot see used, each
with why); the tests are never read, so a function only a test calls is reported. Click commands
are used by their decorator. Unused variables and dataclass fields are left out: records are
written whole (asdict -> summary.json)."""
from __future__ import annotations

import re
from pathlib import Path

from . import ROOT

KINDS = ("function", "method", "property", "class")
WHITELIST = ROOT / "tests" / "dead_code_whitelist.py"
# {{ p.sbatch_of(r) }}, {% for x in p.launches %}, map(attribute="server"): names a template reads
_TEMPLATE_NAME = re.compile(r"\.([A-Za-z_]\w*)|attribute=[\"']([A-Za-z_]\w*)[\"']")


def template_names(templates: Path) -> set[str]:
    return {a or b for f in sorted(templates.glob("*.j2")) for a, b in _TEMPLATE_NAME.findall(f.read_text())}


def unreached(product: Path = ROOT / "slurm_ab", callers: tuple[Path, ...] = (ROOT / "benchmarks",),
              templates: Path = ROOT / "sbatch_templates", whitelist: Path = WHITELIST) -> list[str]:
    """'path:line: unused function NAME' for every product definition nothing outside tests uses."""
    from vulture import Vulture

    v = Vulture(ignore_decorators=["@main.command", "@main.group"])
    v.scavenge([str(product), *(str(c) for c in callers if c.exists()), str(whitelist)])
    v.scan("\n".join(f"_.{n}" for n in sorted(template_names(templates))), filename="<templates>")
    root = product.resolve()
    return [f"{Path(i.filename).resolve().relative_to(root.parent)}:{i.first_lineno}: {i.message}"
            for i in v.get_unused_code(min_confidence=60)
            if i.typ in KINDS and Path(i.filename).resolve().is_relative_to(root)]
