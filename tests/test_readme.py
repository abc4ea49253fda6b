"""Every command line of the README's usage blocks and of `make help` works as written (issue 35).

The lines are read from README.md's code blocks and from `make help` (none is copied here), run
through bash as they are written, with placeholders (RUN_ID, JOBID, ...) replaced, and their
output must show what EXPECT says the README promises. How a line runs depends on what it does:

- on the local cluster where it is the local workflow (`make submit`, `make ab`: SITE=local): the
  submission must print its job id and run directory and land in this worker's lane; the first
  one is then followed by the README's `slurm-ab watch RUN_ID` and stopped by its `slurm-ab cancel
  RUN_ID` (watch must see it end cancelled), the others are cancelled with scancel; every job is
  waited for, so a long job costs seconds;
- as a dry-run where it would submit to a real cluster (`slurm-ab submit` on the built-in example
  site or the README's copy of it, mysite.toml): `submit` becomes `dry-run`, without the flags only
  submit has (--wait, ...), and must write nothing;
- as written in a scratch directory that holds stored runs (tests/fixtures) where a line reads
  results (`collect`, `report`, `compare`), and the other everyday lines (`modes`, `dry-run`,
  `render`, `make dry-run`, `make collect`) the same way;
- the machine's own targets: `make setup` as written (a no-op once done, and `make test` has done
  it), `make cluster-status` as written; `make cluster-up` and `make cluster-down` would restart
  the cluster every lane's tests are using, `make demo` runs three long jobs, `make test` is this
  suite: for those `make -n` must show the recipe the README promises (test_netns' exclusive test
  takes the cluster down and up, test_e2e runs the demo's three modes).

A line is matched to its expectation by its command and positional words (`slurm-ab submit tp32
tp32-dflash`, `make ab`), so a misspelled option still runs, and fails; a line with no expectation
fails too, after it ran.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.lanes import partition

README = ROOT / "README.md"
FIXTURES = ROOT / "tests" / "fixtures"

# Stored runs a scratch results/ directory holds: name in results/ -> source (real local-cluster runs).
STORED = {
    "tp32-stored": FIXTURES / "runs" / "tp32-stored",              # one run, job 19, verdict ok
    "dev-tp32": FIXTURES / "report" / "dev-tp32",                  # the seed's A side
    "dev-tp32-dflash": FIXTURES / "report" / "dev-tp32-dflash",    # ... and its B side
    "camp-ab": FIXTURES / "report-campaign" / "camp-ab",           # an A/B campaign, 3 passes a mode
}


def stored_job_id() -> str:
    from slurm_ab.model.rundir import job_id_of
    return str(job_id_of(STORED["tp32-stored"]))


# What a placeholder of the README stands for. RUN_ID: the run the first local submission made.
PLACEHOLDERS = {
    "JOBID": stored_job_id,          # slurm-ab collect JOBID
    "123": stored_job_id,            # make collect JOBID=123 (make help)
    "RUN_A": lambda: "dev-tp32",
    "RUN_B": lambda: "dev-tp32-dflash",
    "CAMPAIGN": lambda: "camp-ab",
}

# What each line's output must show (regular expressions, multi-line), keyed by its command and
# positional words; FILES: what must exist afterwards in the scratch directory.
SCRIPT = (r"^#!/bin/bash$", r"^#SBATCH hetjob$", r"^#SBATCH --job-name=ab-")
EXPECT: dict[str, tuple[str, ...]] = {
    "slurm-ab modes": (r"^tp32 +2 x TP32", r"^pp8 ", r"^tp32-dflash ", r"^pd-1p1d +1P1D"),
    "slurm-ab dry-run tp32": (*SCRIPT, r"^experiment \w+, mode tp32: ", r"^preflight ", r"^duration estimate: "),
    "slurm-ab submit tp32": (*SCRIPT, r"^experiment \w+, mode tp32: ", r"^duration estimate: "),
    "slurm-ab submit tp32 tp32-dflash": (*SCRIPT, r"^campaign: modes tp32, tp32-dflash; \d+ repeat\(s\) .* in one "
                                         r"allocation$"),
    # the README's versions.toml (its toml block), written beside it by workdir()
    "slurm-ab dry-run v0523 v0524": (*SCRIPT, r"^campaign: modes v0523, v0524; ",
                                     r"^ +image of v0524: /shared/containers/sglang-v0\.5\.24\.sqsh "),
    "slurm-ab capacity tp32": (*SCRIPT, r"^capacity search: modes tp32, one launch each; \d+ open-loop probes "),
    "slurm-ab dry-run pd-1p1d": (*SCRIPT, r"^role prefill: 1 instance", r"^role decode: 1 instance",
                                 r"^KV transfer: "),
    "slurm-ab render pp8": (r"^wrote \S*results/x/job\.sbatch \(run x\); submit with: sbatch \S*results/x/job\.sbatch$",),
    "slurm-ab watch RUN_ID": (r"ended: CANCELLED", r"^verdict: cancelled"),
    "slurm-ab cancel RUN_ID": (r"^cancelled job \d+; evidence stays in \S+",),
    # the answer line first; a run's row as a terminal shows one row (transposed)
    "slurm-ab collect JOBID": (r"\Atp32-stored \(tp32, C=8\): ok: Output TPS \(steady state\) \d+\.\d\d; rests on ",
                               r"^\| Run +\| +tp32-stored \|", r"^\| Mode +\| +tp32 \|", r"^\| Output TPS +\| +\d+\.\d\d \|",
                               r"^verdict: ok$"),
    # the history, oldest first, folded to 120 columns: run, date, workload, mode, verdict first
    "slurm-ab report": (r"^\| Run +\| Submitted +\| Workload +\| Mode +\| Verdict ",
                        r"^\| dev-tp32 +\| \d{4}-\d\d-\d\d \d\d:\d\d \| random-ids 16384->512, C=8, 40 prompts \| tp32 +\| ok ",
                        r"^\| dev-tp32-dflash +\| .* \| tp32-dflash +\| ok ", r"^\| tp32-stored +\| .* \| tp32 +\| ok ",
                        r"^\| Run +\| +Output TPS"),
    "slurm-ab compare RUN_A RUN_B": (r"^\| metric +\| +tp32 +\| +tp32-dflash +\| +change", r"^\| Input / Output TPS .*%"),
    "slurm-ab compare CAMPAIGN": (r"^## tp32-dflash vs tp32", r"\| +interval +\|", r"\| verdict ",
                                  r"^\| \*\*Output TPS \(steady state\)\*\* \(primary\) .*%"),
    "make dry-run": (*SCRIPT, r"python3 -m slurm_ab_testbed\.emulator"),
    "make submit": (r"^submitted job \d+ \(tp32: 1 timed pass, run \S+\)$", r"^run directory: \S+"),
    "make ab": (r"^submitted job \d+ \(tp32, tp32-dflash: \d+ timed passes, run \S+\)$", r"^run directory: \S+"),
    "make collect": (r"^\| Run +\| +tp32-stored \|", r"^verdict: ok$"),
    "make setup": (),                                  # and nothing installed (test_line)
    "make cluster-status": (r"^slurmctld +up ", r"^slurmd node\d+ +up ", r"^network "),
    "make cluster-up": (r"cluster\.sh up$",),            # make -n
    "make cluster-down": (r"^bash testbed/slurm_ab_testbed/cluster\.sh down$",),
    "make demo": (r"^bash scripts/demo\.sh$",),
    "make test": (r"-m 'cluster and not exclusive'", r"-m 'not cluster and not exclusive'", r"-m exclusive\b"),
}
FILES = {
    "slurm-ab render pp8": ("results/x/job.sbatch", "results/x/manifest.json"),
    "slurm-ab collect JOBID": ("results/tp32-stored/summary.md", "results/tp32-stored/report.html"),
    "make collect": ("results/tp32-stored/summary.md",),
}
# Targets that would restart the shared cluster, run long jobs on it, or are this suite: make -n.
MAKE_N = {"cluster-up", "cluster-down", "demo", "test"}


# ---- the lines -----------------------------------------------------------------------------------

def readme_lines(text: str) -> list[str]:
    """The `slurm-ab ...` and `make ...` lines of a Markdown text's code blocks (fenced, or indented
    by 4 spaces or more), without their comments, in order."""
    out, fenced = [], False
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not (fenced or raw.startswith("    ")):
            continue
        cmd = re.split(r"\s+#", raw.strip(), maxsplit=1)[0].strip()
        if re.match(r"(slurm-ab|make)\s", cmd) and cmd not in out:
            out.append(cmd)
    return out


def help_lines() -> list[str]:
    """The commands `make help` names: each `make ...` line up to its description."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60).stdout
    return [re.split(r"\s{2,}", line.strip())[0] for line in out.splitlines() if line.startswith("make ")]


def all_lines() -> list[tuple[str, str]]:
    """(line, where) for every line of the README and of make help, each once."""
    seen: dict[str, str] = {}
    for line in readme_lines(README.read_text()):
        seen.setdefault(line, "README.md")
    for line in help_lines():
        seen[line] = "README.md and make help" if seen.get(line) == "README.md" else seen.get(line, "make help")
    return list(seen.items())


def key(line: str) -> str:
    """The command and its positional words: what the line's expectation is looked up by."""
    head = []
    for w in shlex.split(line):
        if w.startswith("-") or "=" in w or w == "|":
            break
        head.append(w)
    return " ".join(head)


def site_of(words: list[str]) -> str:
    return words[words.index("--site") + 1] if "--site" in words else "example"


def kind(line: str) -> str:
    """local (submits on the local cluster), follow (watch/cancel of that job), cluster (needs the
    cluster as is), dry-run (would submit to a real cluster), make-n, setup, or here."""
    w = shlex.split(line)
    if w[0] == "make":
        target = w[1]
        if target in ("submit", "ab"):
            return "local" if not any(a.startswith("SITE=") and a != "SITE=local" for a in w) else "dry-run"
        return {"cluster-status": "cluster", "setup": "setup"}.get(target, "make-n" if target in MAKE_N else "here")
    if w[1] == "submit":
        return "local" if site_of(w) == "local" else "dry-run"
    return "follow" if w[1] in ("watch", "cancel") else "here"


LINES = all_lines()


def lines_of(*kinds: str) -> list[str]:
    return [line for line, _ in LINES if kind(line) in kinds]


# ---- running a line ------------------------------------------------------------------------------

def env() -> dict:
    """This environment without the user's slurm-ab defaults or a terminal's size (pytest-xdist's
    workers set COLUMNS=80: the README shows output at the default 120); the slurm-ab and python3
    of this interpreter first on PATH (make's PY is python3)."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("SLURM_AB_SITE", "RUN_ID", "SLURM_AB_RESULTS", "COLUMNS", "LINES")}
    e["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), str(Path(sys.executable).parent), e.get("PATH", "")])
    return e


def substitute(line: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        line = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w=-])", value, line)
    return line


def as_dry_run(line: str) -> str:
    """`slurm-ab submit ...` as the dry-run of the same job: the flags only submit has dropped."""
    from slurm_ab.cli.main import main

    opts = lambda c: {o for p in main.commands[c].params for o in p.opts}   # noqa: E731
    only_submit = opts("submit") - opts("dry-run")
    w = shlex.split(line)
    return shlex.join([w[0], "dry-run", *(a for a in w[2:] if a not in only_submit)])


def workdir(tmp_path: Path) -> Path:
    """A scratch directory shaped like a checkout for make (Makefile, testbed/), with stored runs
    in results/ and the README's mysite.toml (a copy of the example site)."""
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    for name, src in STORED.items():
        shutil.copytree(src, work / "results" / name)
    for name in ("Makefile", "testbed"):
        (work / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "slurm_ab" / "data" / "sites" / "example.toml", work / "mysite.toml")
    (work / "versions.toml").write_text(readme_toml("versions.toml"))
    return work


def readme_toml(name: str) -> str:
    """The README's TOML block that follows the first mention of `name`."""
    text = README.read_text()
    m = re.search(r"```toml\n(.*?)```", text[text.index(f"`{name}`"):], re.S)
    assert m, f"no toml block after `{name}` in README.md"
    return m.group(1)


def run(cmd: str, cwd: Path, timeout: float = 300) -> tuple[int, str]:
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def check_output(line: str, out: str, work: Path | None = None) -> None:
    k = key(line)
    assert k in EXPECT, f"`{line}`: no expectation in test_readme.EXPECT for {k!r} (it ran:\n{out[-2000:]})"
    for pattern in EXPECT[k]:
        assert re.search(pattern, out, re.M), \
            f"`{line}`: its output no longer shows {pattern!r}:\n{out[-4000:]}"
    for f in FILES.get(k, ()) if work else ():
        assert (work / f).exists(), f"`{line}` did not write {f}:\n{out[-2000:]}"


# ---- the tests -----------------------------------------------------------------------------------

def test_the_lines_are_there_and_each_has_an_expectation():
    """The fresh-machine commands are visible; every line has an expectation and every expectation
    a line (a line that changed its words is not silently left unchecked)."""
    readme = readme_lines(README.read_text())
    assert readme[:2] == ["make demo", "make test"], readme[:4]
    assert len(readme) >= 20 and len(help_lines()) >= 10, (readme, help_lines())
    keys = {key(line) for line, _ in LINES}
    assert sorted(keys - EXPECT.keys()) == [], "lines without an expectation"
    assert sorted(EXPECT.keys() - keys) == [], "expectations without a line"
    assert sorted(FILES.keys() - keys) == []
    assert lines_of("local") and lines_of("follow") and lines_of("dry-run"), LINES


@pytest.mark.parametrize("line", lines_of("here", "dry-run"))
def test_line(line, tmp_path):
    """A line that needs no cluster, run as written in a scratch directory (submit: as its dry-run)."""
    work = workdir(tmp_path)
    before = sorted(p.name for p in (work / "results").iterdir())
    cmd = substitute(line, {k: v() for k, v in PLACEHOLDERS.items()})
    if kind(line) == "dry-run":
        cmd = as_dry_run(cmd)
    rc, out = run(cmd, work)
    assert rc == 0, f"`{line}` (run as `{cmd}`) exited {rc}:\n{out[-4000:]}"
    check_output(line, out, work)
    if kind(line) == "dry-run" or key(line).startswith(("slurm-ab dry-run", "make dry-run")):
        assert sorted(p.name for p in (work / "results").iterdir()) == before, f"`{cmd}` wrote into results/"


@pytest.mark.parametrize("line", lines_of("make-n"))
def test_machine_target_recipe(line):
    """`make cluster-up|cluster-down|demo|test`: what make would run (-n), as the README says."""
    rc, out = run(line.replace("make ", "make -n ", 1), ROOT)
    assert rc == 0, f"`{line}` (as make -n) exited {rc}:\n{out[-4000:]}"
    check_output(line, out)
    if line == "make demo":
        rc, sh = run("bash -n scripts/demo.sh && shellcheck -x scripts/demo.sh", ROOT)
        assert rc == 0, sh


@pytest.mark.parametrize("line", lines_of("setup"))
def test_setup_is_a_quick_no_op_when_done(line):
    """`make setup` as written: `make test` ran it before this test, so it must install nothing."""
    rc, missing = run("python3 testbed/setup_check.py", ROOT)
    assert rc == 0, f"make setup is not done for this checkout: {missing}"
    rc, _ = run("make -q build/setup.stamp", ROOT)      # never install from a test: make test ran setup
    assert rc == 0, "build/setup.stamp is older than a pyproject.toml: `make setup` would install (run it first)"
    rc, out = run(line, ROOT, timeout=120)
    assert rc == 0, out
    check_output(line, out)
    assert not re.search(r"pip install|apt-get|cluster\.sh install", out), f"`{line}` installed:\n{out}"


@pytest.mark.parametrize("line", [line for line, _ in LINES if line.startswith("make ") and "=" in line])
def test_every_make_variable_of_a_line_counts(line, tmp_path):
    """make ignores a variable it does not know (REPAETS=3 would run the default silently): each
    VAR of a line must reach the command make runs (make -n with VAR set to another value)."""
    work = workdir(tmp_path)
    words = shlex.split(line)
    rc, full = run(shlex.join(["make", "-n", *words[1:]]), work)
    assert rc == 0, full
    for var in [w for w in words if "=" in w]:
        other = var.split("=")[0] + "=readme-probe"
        rc, probe = run(shlex.join(["make", "-n", *(other if w == var else w for w in words[1:])]), work)
        assert "readme-probe" in probe, f"`{line}`: {var} does not reach what make runs:\n{full}"


def test_make_passes_the_variables_its_help_names(tmp_path):
    """make help names WAIT=1 for submit and CONCURRENCY, ORDER, BURN_IN, WAIT for ab: each reaches
    slurm-ab as its option, and the command make would run is accepted (as its dry-run)."""
    helptext = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    work = workdir(tmp_path)
    cases = {
        "make submit MODE=tp32 WAIT=1": ("--wait",),
        "make ab A=tp32 B=tp32-dflash REPEATS=3 CONCURRENCY=1,8 ORDER=interleaved BURN_IN=1 WAIT=1":
            ("--repeats 3", "--concurrency 1,8", "--order interleaved", "--burn-in", "--wait"),
    }
    for line, options in cases.items():
        for var in re.findall(r"\b([A-Z_]+)=", line):
            assert f"{var}=" in helptext, (var, helptext)
        rc, out = run(line.replace("make ", "make -n ", 1), work)
        assert rc == 0, out
        out = re.sub(r"\s*\\\n\s*", " ", out)            # the recipe's continued lines
        cmd = next(c for c in out.splitlines() if " -m slurm_ab submit " in c)
        for option in options:
            assert f" {option}" in cmd, (option, cmd)
        dry = as_dry_run(shlex.join(["slurm-ab", *shlex.split(cmd.split(" -m slurm_ab ", 1)[1])]))
        rc, out = run(dry, work)
        assert rc == 0, f"`{line}`'s command, as `{dry}`: exited {rc}:\n{out[-4000:]}"


# ---- on the local cluster ------------------------------------------------------------------------

def squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %P"], capture_output=True, text=True).stdout
    return out.split("\n")[0].strip()


def wait_ended(job_ids: list[str], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while any(squeue_state(j) for j in job_ids):
        assert time.monotonic() < deadline, {j: squeue_state(j) for j in job_ids}
        time.sleep(0.5)


def submitted(out: str) -> tuple[str, str, str | None]:
    """(job id, run id, collector job id) from submit's output."""
    m = re.search(r"^submitted job (\d+) \(.*, run (\S+)\)$", out, re.M)
    assert m, out
    c = re.search(r"^collector job (\d+) runs after it", out, re.M)
    return m.group(1), m.group(2), c.group(1) if c else None


@pytest.mark.cluster
@pytest.mark.parametrize("line", lines_of("local"))
def test_local_submission(line, local_cluster, tmp_path):
    """A local line, run as written: it submits (job id and run directory printed, the job in this
    worker's lane); the first one is followed by the README's watch line and stopped by its cancel
    line, the others are cancelled with scancel; each job is waited for."""
    work = workdir(tmp_path)
    rc, out = run(line, work, timeout=180)
    assert rc == 0, f"`{line}` exited {rc}:\n{out[-4000:]}"
    job, run_id, collector = submitted(out)
    print(f"`{line}`:\n{out}")                      # pytest -rA shows what each line printed
    jobs = [j for j in (job, collector) if j]
    watcher = None
    try:
        check_output(line, out)
        assert (work / "results" / run_id / "job.sbatch").exists(), out
        if partition():
            assert squeue_state(job).split()[-1] == partition(), squeue_state(job)
        if collector:      # collecting a cancelled job is not what this test is about
            subprocess.run(["scancel", collector], check=True)
        if line != lines_of("local")[0]:
            subprocess.run(["scancel", job], check=True)
            wait_ended(jobs)
            return
        values = {"RUN_ID": run_id}
        watch = next(x for x in lines_of("follow") if key(x).startswith("slurm-ab watch"))
        cancel = next(x for x in lines_of("follow") if key(x).startswith("slurm-ab cancel"))
        assert len(lines_of("follow")) == 2, lines_of("follow")
        watcher = subprocess.Popen(["bash", "-c", substitute(watch, values)], cwd=work, env=env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        deadline = time.monotonic() + 120
        while not squeue_state(job).startswith("RUNNING"):
            assert time.monotonic() < deadline and watcher.poll() is None, (squeue_state(job), watcher.poll())
            time.sleep(0.3)
        rc, out = run(substitute(cancel, values), work)
        assert rc == 0, f"`{cancel}` exited {rc}:\n{out}"
        check_output(cancel, out)
        print(f"`{cancel}`:\n{out}")
        wout, _ = watcher.communicate(timeout=240)
        assert watcher.returncode == 1, f"`{watch}` exited {watcher.returncode} (a cancelled run: 1):\n{wout}"
        check_output(watch, wout)
        print(f"`{watch}`:\n{wout}")
        wait_ended(jobs)
    finally:
        if watcher is not None and watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGTERM)
            watcher.wait(30)
        subprocess.run(["scancel", *jobs])
        wait_ended(jobs)


@pytest.mark.cluster
@pytest.mark.parametrize("line", lines_of("cluster"))
def test_cluster_line(line, local_cluster):
    """`make cluster-status` as written: the running cluster, read only."""
    rc, out = run(line, ROOT, timeout=60)
    assert rc == 0, out
    check_output(line, out)
