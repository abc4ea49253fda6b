"""Is `make setup` done for THIS checkout? Exit 0 if so, else print what is missing and exit 1.

Checks in well under a second what `make setup` leaves behind: the tools on PATH, and slurm_ab and
slurm_ab_testbed importable from this checkout (CI clones the repo elsewhere on a machine that may
hold an install from another checkout) with the modules the tests and the local site use. Nothing
heavy is imported (torch alone takes seconds here). The benchmark clients (sglang) are not
installed here but in directories of their own (`make local-assets`).
"""
import importlib.util
import shutil
import sys
from pathlib import Path

sys.path.pop(0)  # not testbed/: it holds slurm_ab_testbed whether installed or not
ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("sbatch", "sacct", "slurmctld", "shellcheck", "chromium", "ip", "tc", "nsenter")
MODULES = ("submitit", "click", "jinja2", "pandas", "tabulate", "pytest", "hypothesis",
           "sglang_router", "tokenizers", "torch", "torchvision", "triton")
OURS = {"slurm_ab": ROOT / "slurm_ab", "slurm_ab_testbed": ROOT / "testbed" / "slurm_ab_testbed"}


def missing() -> list[str]:
    out = [f"{t} not on PATH" for t in TOOLS if shutil.which(t) is None]
    for name, where in OURS.items():
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve().parent if spec and spec.origin else None
        if origin != where:
            out.append(f"{name} imports from {origin or 'nowhere'}, not {where}")
    out += [f"python module {m} missing" for m in MODULES if importlib.util.find_spec(m) is None]
    if not _has_locale("de_DE.utf8"):       # the job script's locale tests (a decimal comma)
        out.append("locale de_DE.UTF-8 not generated")
    return out


def _has_locale(name: str) -> bool:
    import subprocess
    try:
        return name in subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return False


if __name__ == "__main__":
    problems = missing()
    for p in problems:
        print(f"setup needed: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)
