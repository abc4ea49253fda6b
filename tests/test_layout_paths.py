"""rundir.Layout owns every path of a run directory: the job script writes no $RUN_DIR path that
Layout does not name (issue 17), and the plan takes the passes' files from it."""
from __future__ import annotations

import fnmatch
import re

import pytest

from helpers.scripts import render
from slurm_ab.job.campaign_plan import CampaignOptions, plan_campaign
from slurm_ab.job.render import render_script
from slurm_ab.model.rundir import PATHS, Layout
from slurm_ab.model.sources import Sources

from helpers.scripts import GOLDEN_SETS

PATTERNS = [re.sub(r"\{[a-z]+\}", "*", v) for v in PATHS.values()]
# Set per pass from LAUNCH_PASSES, whose file names the plan takes from PATHS (tested below).
# A sequential campaign's files: generated from PATHS by render.sequential_parts (tested below).
FROM_THE_PLAN = {"PASS_BENCH", "PASS_CLIENT_LOG", "F_SEQ_SPEC", "F_STOP_RULE", "F_STOP_RULE_LOG"}
_PATH = re.compile(r'"?\$(?:\{RUN_DIR\}|RUN_DIR)"?/([^\s\'()<>|;]*)')
_VAR = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")


def _written_paths(text: str) -> set[str]:
    """Every $RUN_DIR/... of a script, a leading variable replaced by the values assigned to it."""
    out = set()
    for m in _PATH.finditer(text):
        path = m.group(1).replace('"', "")
        lead = re.match(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", path)
        if lead and lead.group(1) in FROM_THE_PLAN:
            continue
        if lead:
            values = re.findall(rf'\b{lead.group(1)}="([^"]+)"', text)
            assert values, f"$RUN_DIR/{path}: no assignment of {lead.group(1)} in the script"
            out |= {v + path[lead.end():] for v in values}
        else:
            out.add(path)
    return out


@pytest.mark.parametrize("sets", [(), ("cluster.address=interface", "cluster.address_interface=ib0")])
def test_every_path_the_job_writes_is_a_layout_path(sets):
    text = render("tp32-dflash", sets=sets) + render_script(plan_campaign(
        Sources("example", (), GOLDEN_SETS), ["tp32", "tp32-dflash"], "RUN-ID",
        CampaignOptions(repeats=2, order="blocked")))
    paths = _written_paths(text)
    assert {"events.log", "logs/router.log", "metrics"} <= paths
    unknown = []
    for p in sorted(paths):
        shown = _VAR.sub("*", p.replace("%t", "*")).rstrip("/")
        if not any(fnmatch.fnmatch(shown, pat) for pat in PATTERNS):
            unknown.append(p)
    assert not unknown, f"paths the job writes that rundir.PATHS does not name: {unknown}"


def test_the_passes_files_come_from_the_layout():
    plan = plan_campaign(Sources("example", (), GOLDEN_SETS), ["tp32", "tp32-dflash"], "R",
                         CampaignOptions(repeats=2, order="blocked"))
    lay = Layout(plan.run_dir and __import__("pathlib").Path(plan.run_dir))
    for step, launch in zip(plan.campaign.launches, plan.campaign.campaign.launches):
        ll = lay.launch(launch)
        assert ll.root == lay.root / step.dir
        for ps, p in zip(step.passes, launch.passes):
            assert ll.root / ps.bench == ll.pass_bench(p.key)
            assert ll.root / ps.client_log == ll.pass_client_log(p.key)
    single = plan_campaign(Sources("example", (), GOLDEN_SETS), ["tp32"], "S")
    (step,) = single.campaign.launches
    assert step.dir == "." and (step.passes[0].bench, step.passes[0].client_log) == \
        (PATHS["bench"], PATHS["client_log"])


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


def test_a_sequential_campaigns_files_are_layout_paths():
    text = render_script(plan_campaign(Sources("example", (), GOLDEN_SETS), ["tp32", "tp32-dflash"], "RUN-ID",
                                       CampaignOptions(launches=4, sequential=True)))
    assigned = dict(re.findall(r"^(F_SEQ_SPEC|F_STOP_RULE|F_STOP_RULE_LOG)=(\S+)$", text, re.M))
    assert assigned == {"F_SEQ_SPEC": PATHS["sequential_spec"], "F_STOP_RULE": PATHS["stop_rule"],
                        "F_STOP_RULE_LOG": PATHS["stop_rule_log"]}
