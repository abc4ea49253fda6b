#!/usr/bin/env python3
"""One-line mutation audit of the tests that need no cluster (issue 36): does any test notice?

Each mutant changes one token of one line of slurm_ab (a comparison, a boolean operator, a `not`,
an integer, `abs`, min/max, True/False, + / -, break/continue), in a copy of the package (never
the checkout: other runs may import it meanwhile), then runs the tests that should catch it
(GROUPS below, non-cluster tests only, `-x`, niced) with the copy first on sys.path. A mutant the
tests pass survives: either a missing test or an equivalent mutant (same behaviour), to judge by
hand. Tests that run slurm-ab in a subprocess see the unmutated package: the groups hold
in-process tests.

    python3 scripts/mutants.py --list                      # the mutants, numbered per file
    python3 scripts/mutants.py slurm_ab/collect/job.py     # every mutant of one file
    python3 scripts/mutants.py --sample 40 --seed 1        # 40 of each group's files, at random
    python3 scripts/mutants.py slurm_ab/collect/job.py:17  # one mutant (as --list numbers it)
    python3 scripts/mutants.py --curated                   # issue 36's three (CURATED below)
    python3 scripts/mutants.py --out build/mutants.tsv ... # one line per mutant: killed/survived

~2-6 s per mutant on 2 cores (pytest's start is ~1.5 s of it). Not run by `make test`.
"""
from __future__ import annotations

import argparse
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# source files (globs under the checkout) -> the test files whose non-cluster tests should catch
# their mutants
GROUPS = {
    "slurm_ab/ab_stats/[!p]*.py": ["tests/test_ab_stats.py", "tests/test_ab_launches.py"],
    "slurm_ab/ab_stats/percentiles.py": ["tests/test_ab_stats.py", "tests/test_ab_launches.py"],
    "slurm_ab/collect/job.py": ["tests/test_collect_site_guards.py", "tests/test_slurm.py",
                                "tests/test_collect_verdicts.py"],
    "slurm_ab/collect/verdict.py": ["tests/test_collect_verdicts.py", "tests/test_collect_site_guards.py",
                                    "tests/test_slurm.py", "tests/test_collect_defects.py",
                                    "tests/test_replica_speed.py"],
    "slurm_ab/model/rundir.py": ["tests/test_rundir.py", "tests/test_rundir_io.py", "tests/test_layout_paths.py",
                                 "tests/test_collect_api.py", "tests/test_submit_unit.py"],
    "slurm_ab/parse/bench.py": ["tests/test_parse_bench.py", "tests/test_bench_details.py"],
    "slurm_ab/parse/stats.py": ["tests/test_parse_bench.py", "tests/test_bench_details.py"],
    "slurm_ab/parse/diagnose.py": ["tests/test_parse_diagnose.py", "tests/test_collect_site_guards.py"],
    "slurm_ab/parse/events.py": ["tests/test_parse_events.py", "tests/test_collect_verdicts.py",
                                 "tests/test_collect_campaign.py"],
    "slurm_ab/parse/nccl.py": ["tests/test_collect_site_guards.py"],
    "slurm_ab/parse/prometheus.py": ["tests/test_server_metrics.py", "tests/test_replica_speed.py"],
    "slurm_ab/parse/server_log.py": ["tests/test_parse_server_log.py", "tests/test_parse_server_scan.py"],
    "slurm_ab/parse/server_scan.py": ["tests/test_parse_server_scan.py", "tests/test_parse_server_log.py"],
    "slurm_ab/parse/text.py": ["tests/test_parse_server_log.py", "tests/test_parse_server_scan.py"],
}

# Mutants no token swap makes: (file, the line's text, its mutant). Issue 36's three: Holm, the
# sacct identity, a Layout pass path (the pass file's name format; tests/test_layout_paths.py pins
# every pass path directly).
CURATED = [
    ("slurm_ab/ab_stats/family.py", "zip(holm(ps), holm_levels(ps, confidence))",
     "zip(ps, [confidence] * len(ps))"),                                                   # Holm skipped
    ("slurm_ab/collect/job.py", "abs(submit - submitted) > SUBMIT_TOLERANCE_S",
     "(submit - submitted) > SUBMIT_TOLERANCE_S"),                                         # earlier record kept
    ("slurm_ab/model/rundir.py", '"bench": "bench-{key}.jsonl",', '"bench": "bench.jsonl",'),  # one file per launch
]

SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "and": "or", "or": "and",
        "+": "-", "-": "+", "True": "False", "False": "True", "min": "max", "max": "min",
        "break": "continue", "continue": "break", "is": "is not", "in": "not in"}


@dataclass(frozen=True)
class Mutant:
    path: str          # relative to the checkout
    number: int        # 1.. in the file, in source order
    line: int
    before: str        # the line
    after: str

    def name(self) -> str:
        return f"{self.path}:{self.number}"


def _docstring_lines(source: str) -> set[int]:
    import ast
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def mutants_of(path: str) -> list[Mutant]:
    """Every one-token mutant of a file, in source order (strings, comments, imports, docstrings,
    type annotations after ':' or '->' on a def line and logging-free lines are left alone)."""
    source = (ROOT / path).read_text()
    lines = source.splitlines(keepends=True)
    skip = _docstring_lines(source)
    out: list[Mutant] = []
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, tok in enumerate(toks):
        row, col = tok.start
        if row > len(lines):
            break
        text = lines[row - 1]
        stripped = text.lstrip()
        if row in skip or stripped.startswith(("import ", "from ", "def ", "class ", "@")) or tok.end[0] != row:
            continue
        new = None
        if tok.type == tokenize.OP or tok.type == tokenize.NAME:
            if tok.string in SWAP:
                if tok.string == "is" and i + 1 < len(toks) and toks[i + 1].string == "not":
                    new = ("is not", "is", toks[i + 1].end[1])
                elif tok.string == "in" and i > 0 and toks[i - 1].string == "not":
                    continue
                elif tok.string == "in" and i > 0 and toks[i - 1].string in ("for",):
                    continue
                elif tok.string == "in" and _in_for(toks, i):
                    continue
                elif tok.string == "-" and i > 0 and toks[i - 1].type == tokenize.OP \
                        and toks[i - 1].string not in (")", "]", "}"):
                    continue        # unary minus
                else:
                    new = (tok.string, SWAP[tok.string], tok.end[1])
            elif tok.string == "not" and not (i > 0 and toks[i - 1].string == "is"):
                nxt = toks[i + 1] if i + 1 < len(toks) else None
                if nxt is not None and nxt.string == "in":
                    new = ("not in", "in", nxt.end[1])
                else:
                    new = ("not ", "", col + 4)
            elif tok.string == "abs" and i + 1 < len(toks) and toks[i + 1].string == "(":
                new = ("abs", "", tok.end[1])
        elif tok.type == tokenize.NUMBER and re.fullmatch(r"\d+", tok.string):
            n = int(tok.string)
            new = (tok.string, "1" if n == 0 else "0" if n == 1 else str(n + 1), tok.end[1])
        if new is None:
            continue
        old, rep, end = new
        if text[col:end] != old:
            continue
        mutated = text[:col] + rep + text[end:]
        if mutated != text:
            out.append(Mutant(path, len(out) + 1, row, text.rstrip("\n"), mutated.rstrip("\n")))
    return out


def _in_for(toks, i) -> bool:
    """`in` of a for clause (a comprehension's too): not a membership test. Back from it over the
    loop target (names, commas, brackets) to `for`."""
    import keyword
    j = i - 1
    while j >= 0:
        s = toks[j].string
        if s in (")", "]"):
            depth = 0
            while j >= 0:
                depth += toks[j].string in (")", "]")
                depth -= toks[j].string in ("(", "[")
                if depth == 0:
                    break
                j -= 1
        elif s == "for":
            return True
        elif not (s == "," or (toks[j].type == tokenize.NAME and not keyword.iskeyword(s))):
            return False
        j -= 1
    return False


def curated() -> list[Mutant]:
    out = []
    for n, (path, old, new) in enumerate(CURATED, 1):
        lines = (ROOT / path).read_text().splitlines()
        row = next(i for i, line in enumerate(lines, 1) if old in line)
        out.append(Mutant(path, -n, row, lines[row - 1], lines[row - 1].replace(old, new)))
    return out


def tests_for(path: str) -> list[str]:
    found: list[str] = []
    for pattern, tests in GROUPS.items():
        if Path(path).match(pattern) or path == pattern:
            found += [t for t in tests if t not in found]
    return found


def targets() -> list[str]:
    out: list[str] = []
    for pattern in GROUPS:
        for p in sorted(ROOT.glob(pattern)):
            rel = str(p.relative_to(ROOT))
            if rel not in out and not rel.endswith("__init__.py"):
                out.append(rel)
    return out


def run_one(m: Mutant | None, copy: Path, timeout: float, tests: list[str]) -> tuple[str, str, float]:
    """(killed|survived|timeout|error, the first failing test or '', seconds); None: no mutant."""
    target = copy / (m.path if m else "slurm_ab/__init__.py")
    original = target.read_text()
    if m:
        lines = original.splitlines(keepends=True)
        lines[m.line - 1] = m.after + ("\n" if lines[m.line - 1].endswith("\n") else "")
        target.write_text("".join(lines))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import pytest; "
            "sys.exit(pytest.main(sys.argv[2:]))")
    cmd = ["nice", "-n", "10", sys.executable, "-c", code, str(copy), "-x", "-q", "-p", "no:cacheprovider",
           "-p", "no:xdist", "-m", "not cluster and not exclusive", "--basetemp", str(copy.parent / "tmp"),
           "-o", "addopts=", *tests]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        took = time.monotonic() - t0
        failed = re.search(r"^FAILED (\S+)", r.stdout, re.M) or re.search(r"^ERROR (\S+)", r.stdout, re.M)
        if r.returncode == 0:
            return "survived", "", took
        if r.returncode == 1 and failed:
            return "killed", failed.group(1), took
        why = failed.group(1) if failed else f"rc={r.returncode} " + r.stdout[-300:].replace("\n", " ")
        return "error", why, took
    except subprocess.TimeoutExpired:
        return "timeout", "", time.monotonic() - t0
    finally:
        target.write_text(original)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="*", help="FILE or FILE:N (default: every file of GROUPS)")
    ap.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    ap.add_argument("--curated", action="store_true", help="the CURATED mutants only")
    ap.add_argument("--sample", type=int, help="at most N mutants per file, at random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", help="append one TSV line per mutant to this file")
    args = ap.parse_args()
    chosen: list[Mutant] = curated() if args.curated else []
    for w in args.what or ([] if args.curated else targets()):
        path, _, num = w.partition(":")
        path = str(Path(path).resolve().relative_to(ROOT)) if Path(path).is_absolute() else path
        ms = mutants_of(path)
        if num:
            ms = [m for m in ms if m.number in {int(x) for x in num.split(",")}]
        elif args.sample and len(ms) > args.sample:
            ms = sorted(random.Random(f"{args.seed}:{path}").sample(ms, args.sample), key=lambda m: m.number)
        chosen += ms
    if args.list:
        for m in chosen:
            print(f"{m.name()}\tline {m.line}\t{m.before.strip()}  ->  {m.after.strip()}")
        return 0
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        copy = Path(tmp) / "pkg"
        shutil.copytree(ROOT / "slurm_ab", copy / "slurm_ab", ignore=shutil.ignore_patterns("__pycache__"))
        out = open(args.out, "a") if args.out else None
        for tests in {tuple(tests_for(m.path)) for m in chosen}:    # the unmutated package passes them
            outcome, test, took = run_one(None, copy, args.timeout, list(tests))
            print(f"unmutated\t{' '.join(tests)}\t{outcome}\t{took:.1f}", flush=True)
            if outcome != "survived":
                print(f"the tests fail without a mutant ({test}): fix that first", file=sys.stderr)
                return 2
        for m in chosen:
            outcome, test, took = run_one(m, copy, args.timeout, tests_for(m.path))
            counts[outcome] = counts.get(outcome, 0) + 1
            line = f"{outcome}\t{m.name()}\t{m.line}\t{m.before.strip()}\t{m.after.strip()}\t{test}\t{took:.1f}"
            print(line, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()
    print("mutants:", len(chosen), ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
    return 1 if counts.get("survived") else 0


if __name__ == "__main__":
    sys.exit(main())
