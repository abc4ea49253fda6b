"""The job script runs on bash 4.2 and later under any locale (issue 31; docs/job-script.md).

No bash older than 5.2 is installed here (Debian 12), so: a static audit of every template and
rendered script for what bash 4.2 lacks (its NEWS: namerefs, negative subscripts and wait -n came
in 4.3; ${x@Q}, mapfile -d and `local -` in 4.4; EPOCHSECONDS, EPOCHREALTIME and BASH_ARGV0 in 5.0;
SRANDOM, wait -p in 5.1), and the job's teardown run with bash 5's variables removed (unset takes
their special meaning away for good: bash(1)) at BASH_COMPAT=44, and under LC_ALL=de_DE.UTF-8,
whose decimal comma broke the teardown's arithmetic. The whole job runs that way on the local
cluster in tests/test_cancel_phases.py. By hand (2026-12-03): bash 4.2.0 and 4.4.0 built from the
bash-4.2 / bash-4.4 tags of bminor/bash ran test_job_functions.py and test_guards.py, and a tp32 job
on the local cluster to its verdict (ok) and a scancel mid-pass (teardown, clean-up, job_end).
Bash 4.4's set -u also counts an empty array read through ${!ref} as unbound (5.x does not, so
no test here sees it): a possibly empty one is read as ${!ref+"${!ref}"} (in_image,
use_mode_software, run_preflight, pd.sh; checked by hand with 4.2.0 and 4.4.0, 2026-12-03).
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.scripts import layout_formats, render, static
from slurm_ab.model.rundir import Layout
from slurm_ab.parse.events import read_events

TEMPLATES = ROOT / "sbatch_templates"

# (pattern, what it is, the bash that brought it)
NEWER_THAN_42 = [
    (r"\b(local|declare|typeset)\s+(-[a-zA-Z]*n[a-zA-Z]*)\b", "a nameref", "4.3"),
    (r"\bunset\s+-n\b", "unset -n (namerefs)", "4.3"),
    (r"\[\[\s+-R\b", "[[ -R ]] (namerefs)", "4.3"),
    (r"\bwait\s+(-[a-z]*[npf])", "wait -n / -p / -f", "4.3-5.1"),
    (r"\$\{[#!]?[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?@[QEPAaKkUuL]\}", "a ${x@op} transformation", "4.4"),
    (r"\b(mapfile|readarray)\s+[^|;&]*-d\b", "mapfile -d", "4.4"),
    (r"\blocal\s+-\s*($|;)", "local - (option scope)", "4.4"),
    (r"\$\{[A-Za-z_][A-Za-z0-9_]*\[-[0-9]+\]\}", "a negative array subscript", "4.3"),
    (r"\bEPOCH(REAL)?TIME\b|\bEPOCHSECONDS\b", "EPOCHSECONDS / EPOCHREALTIME", "5.0"),
    (r"\bBASH_ARGV0\b", "BASH_ARGV0", "5.0"),
    (r"\bSRANDOM\b", "SRANDOM", "5.1"),
    (r"\bshopt\s+-s\s+(inherit_errexit|localvar_inherit|localvar_unset|assoc_expand_once|"
     r"noexpand_translation|patsub_replacement|varredir_close|globskipdots)\b", "a shopt newer than 4.2", "4.4-5.2"),
]
AUDIT_OK = "# bash-4.2 audit: "     # a line that names a feature on purpose (a comment about it)


def _audit(name: str, text: str) -> list[str]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        for pat, what, since in NEWER_THAN_42:
            if re.search(pat, code):
                out.append(f"{name}:{n}: {what} (bash {since}): {line.strip()}")
    return out


def test_the_audit_finds_what_bash_42_lacks():
    """The audit itself: each feature it looks for is found in a line that uses it."""
    samples = ['local -n ref=$1', 'declare -n x="y"', 'unset -n ref', 'wait -n', 'wait -p pid "${a[@]}"',
               'echo "${v@Q}"', 'mapfile -d "" -t xs < f', 'local -', 'x=${arr[-1]}',
               'd=$(( ${EPOCHREALTIME/./} + 1 ))', 'echo $EPOCHSECONDS', 'BASH_ARGV0=x', 'n=$SRANDOM',
               'shopt -s inherit_errexit']
    found = [_audit("s", s) for s in samples]
    assert all(found), [s for s, f in zip(samples, found) if not f]
    assert not _audit("s", 'local ref="R${g}_NODES[@]"; local -a nodes=("${!ref}")\nwait "$pid"\n'
                           '# local -n in a comment\nx=${*: -1}\nmapfile -t x < <(y)\n')


def test_no_template_or_rendered_script_uses_what_bash_42_lacks():
    texts = {p.name: p.read_text() for p in sorted(TEMPLATES.iterdir()) if p.suffix in (".sh", ".j2")}
    texts |= {f"rendered {m}@{s}": render(m, site=s) for m, s in
              (("tp32", "example"), ("tp32", "local"), ("pd-1p1d", "local"), ("tp32-dflash", "example"))}
    from slurm_ab.model.config import builtin_experiment
    pf = builtin_experiment()["preflight"]
    texts |= {f"preflight.{k}": "\n".join(pf[k]) for k in pf if k.endswith("_command") and pf[k][:1] == ["bash"]}
    problems = [p for name, text in texts.items() for p in _audit(name, text)]
    assert problems == []


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    """The job's own header (set -u from bash 4.4, LC_ALL=C for the batch shell) and static part."""
    text = render("tp32")
    head = text[text.index("set -o pipefail\n"):text.index("export LC_ALL=C\n") + len("export LC_ALL=C\n")]
    path = tmp_path_factory.mktemp("bash4") / "static.sh"
    path.write_text(head + static(text))
    return path


# bash 5's own variables gone (unset removes their special meaning for the rest of the shell:
# bash(1) "If EPOCHREALTIME is unset, it loses its special properties, even if it is subsequently
# reset"), bash 4.4's behaviour where bash documents a change (BASH_COMPAT); set -u is the job's
# own header's (from bash 4.4 on: a real bash 4.2 running this test counts an empty array as unset)
BASH4 = "unset EPOCHREALTIME EPOCHSECONDS SRANDOM BASH_ARGV0; BASH_COMPAT=44\n"


@pytest.mark.parametrize("how", ["bash 4 emulation", "de_DE.UTF-8", "both"])
def test_the_teardown_keeps_its_grace_without_bash5_and_under_a_comma_locale(lib, tmp_path, how):
    locales = subprocess.run(["locale", "-a"], capture_output=True, text=True).stdout.split()
    assert "de_DE.utf8" in locales, "make setup generates de_DE.UTF-8 (localedef)"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in {"squeue": 'printf "5.7\\n"', "scancel": "true", "sinfo": "true"}.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(0o755)
    run = tmp_path / "run"
    run.mkdir()
    prelude = BASH4 if how != "de_DE.UTF-8" else ""
    script = f"""{prelude}RUN_DIR={run} POLL=0.1 GRACE=1 SLURM_JOB_ID=5 SLURM_JOB_ID_HET_GROUP_0=5
CLIENT_PID="" PF_PIDS=()
{layout_formats()}source {lib}
trap - EXIT TERM INT USR1
echo "nounset=${{-//[^u]/}} version=${{BASH_VERSINFO[0]}}.${{BASH_VERSINFO[1]}}"
( trap 'exit 143' TERM; sleep 30 >/dev/null 2>&1 & wait ) & CLIENT_PID=$!
sleep 0.3
teardown exit
printf '%.1f\\n' 2.5
"""
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    if how != "bash 4 emulation":
        env["LC_ALL"] = "de_DE.UTF-8"
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "unbound variable" not in r.stderr and r.stdout.strip().endswith("2.5"), r.stdout + r.stderr
    flags = dict(w.split("=") for w in r.stdout.splitlines()[0].split())
    assert (flags["nounset"] == "u") == (tuple(map(int, flags["version"].split("."))) >= (4, 4)), flags
    assert ("LC_ALL=de_DE.UTF-8" if how != "bash 4 emulation" else "LC_ALL=") in _step_locale(lib, env)
    ev = read_events(Layout(run).events)
    term, kill = ev.named("steps_signal")
    assert (term.fields["signal"], kill.fields["signal"]) == ("TERM", "KILL")
    assert 1.0 <= kill.epoch - term.epoch <= 1.8              # GRACE=1: all of it, not more than a poll


def _step_locale(lib: Path, env: dict) -> str:
    """The locale words the steps get (STEP_LOCALE): the submitter's LC_ALL back."""
    text = render("tp32")
    line = next(x for x in text.splitlines() if x.startswith("STEP_LOCALE="))
    head = text[text.index("set -o pipefail\n"):text.index("export LC_ALL=C\n") + len("export LC_ALL=C\n")]
    r = subprocess.run(["bash", "-c", head + line + '\necho "${STEP_LOCALE[*]} batch=$LC_ALL"'],
                       capture_output=True, text=True, env=env)
    assert r.stdout.strip().endswith("batch=C"), r.stdout + r.stderr
    return r.stdout
