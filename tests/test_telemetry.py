"""Telemetry and profiles without a cluster (issue 34): the samplers' files parsed from the real
tools' formats, the rules joined to a window, the schedule and the job script of profiled passes."""
from __future__ import annotations

import calendar
import re
import os
import subprocess
import time

import pytest

from helpers.scripts import render, shellcheck
from slurm_ab.collect.telemetry import (LaunchTelemetry, client_flag, host_figures, low_nodes, node_figures,
                                        pass_telemetry, pass_window)
from slurm_ab.model.campaign import Launch, Pass, schedule
from slurm_ab.model.sources import Sources, load_experiment
from slurm_ab.parse.events import EventLog, parse_event_line
from slurm_ab.parse.telemetry import GpuFile, GpuSample, read_gpu_file, read_host_file, reason_names

FIELDS = ("timestamp", "index", "power.draw", "clocks.sm", "clocks.mem", "utilization.gpu", "memory.used",
          "temperature.gpu", "clocks_throttle_reasons.active")
# nvidia-smi 580 on an H200 (shared/research/gpu-telemetry.md): header names, not query names
HEADER = ("timestamp, index, power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz], "
          "utilization.gpu [%], memory.used [MiB], temperature.gpu, clocks_event_reasons.active")


def _stamp(epoch: float, offset: int) -> str:
    t = time.gmtime(epoch + offset)
    return time.strftime("%Y/%m/%d %H:%M:%S", t) + f".{int(round(epoch * 1000)) % 1000:03d}"


def _gpu_file(tmp_path, rows, offset=3600, node="node07", name="gpu-r1-n1.log"):
    f = tmp_path / name
    lines = [f"# slurm-ab telemetry node={node} epoch=1796300000.5 tz=+0100" if offset == 3600 else
             f"# slurm-ab telemetry node={node} epoch=1796300000.5 tz=+0000", HEADER]
    lines += [f"{_stamp(t, offset)}, {g}, {p:.2f}, {sm}, 3201, {u}, 121345, 50, 0x{r:016x}" for t, g, p, sm, u, r in rows]
    f.write_text("\n".join(lines) + "\n")
    return f


def test_nvidia_smi_rows_read_with_the_samplers_utc_offset(tmp_path):
    f = _gpu_file(tmp_path, [(1796300001.0, 0, 79.8, 345, 0, 1), (1796300001.5, 0, 620.0, 1980, 100, 0)])
    text = f.read_text().replace("620.00", "[N/A]")          # a field the driver cannot give
    f.write_text(text)
    g = read_gpu_file(f, FIELDS)
    assert g.node == "node07" and g.started == 1796300000.5 and g.source == "nvidia-smi" and g.bad_lines == 0
    a, b = g.samples
    assert abs(a.t - 1796300001.0) < 1e-6 and a.power_w == 79.8 and a.sm_mhz == 345 and a.reasons == 1
    assert b.power_w is None and b.util_pct == 100
    # the units form (--format=csv without nounits) reads the same numbers
    f.write_text(f.read_text().replace(", 79.80,", ", 79.80 W,").replace(", 345,", ", 345 MHz,"))
    assert read_gpu_file(f, FIELDS).samples[0].power_w == 79.8
    assert reason_names(0x48) == ["HW slowdown", "HW thermal slowdown"]


def test_dcgm_scrapes_read_with_the_energy_counter(tmp_path):
    f = tmp_path / "gpu-r0-n0.log"
    f.write_text("# slurm-ab telemetry node=node01 epoch=10.0 tz=+0000\n"
                 "# slurm-ab sample 100.000\n"
                 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-x",pci_bus_id="00000000:18:00.0",device="nvidia0",'
                 'modelName="NVIDIA H200",Hostname="node01"} 80.000000\n'
                 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-x",device="nvidia0"} 1000000\n'
                 "# slurm-ab error 101.000 <urlopen error [Errno 111] Connection refused>\n"
                 "# slurm-ab sample 102.000\n"
                 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-x"} 600.000000\n'
                 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-x"} 1800000\n')
    g = read_gpu_file(f, FIELDS)
    assert g.source == "dcgm" and len(g.samples) == 2 and g.errors == ("<urlopen error [Errno 111] Connection refused>",)
    n = node_figures(g, (100.5, 101.5), 3.0, "node01", "replica 0", "server", 0, "f")
    assert abs(n.energy_j - 400.0) < 1e-6          # the counter, linear between scrapes: 800 J over 2 s


def test_energy_is_the_samples_integral_and_a_gap_makes_it_unknown(tmp_path):
    # 2 GPUs, a sample every 0.5 s holding the average since the one before
    rows = [(1796300000.0 + 0.5 * k, g, 100.0 + 10 * k, 1980, 100, 0) for k in range(21) for g in (0, 1)]
    g = read_gpu_file(_gpu_file(tmp_path, rows), FIELDS)
    n = node_figures(g, (1796300001.0, 1796300009.0), 3.0, "node07", "replica 1", "server", 1, "gpu-r1-n1.log")
    # the samples at 1.5 .. 9.0 s hold 130 .. 280 W for 0.5 s each
    assert abs(n.energy_j - 2 * sum(0.5 * (100 + 10 * k) for k in range(3, 19))) < 1e-6
    assert n.gpus == 2 and n.gap is None and abs(n.max_gap_s - 0.5) < 1e-6
    gappy = [r for r in rows if not 1796300003.2 < r[0] < 1796300007.4]
    n = node_figures(read_gpu_file(_gpu_file(tmp_path, gappy), FIELDS), (1796300001.0, 1796300009.0), 3.0,
                     "node07", "replica 1", "server", 1, "gpu-r1-n1.log")
    assert n.energy_j is None and re.match(
        r"node07 \(replica 1 node rank 1\): no GPU sample for 4\.5 s \(\d\d:\d\d:\d\d\.0 \.\. \d\d:\d\d:\d\d\.5\) "
        r"within the pass \[gpu-r1-n1.log\]", n.gap), n.gap
    short = [r for r in rows if r[0] <= 1796300006.0]              # the sampler ended before the window
    n = node_figures(read_gpu_file(_gpu_file(tmp_path, short), FIELDS), (1796300001.0, 1796300009.0), 3.0,
                     "node07", "replica 1", "server", 1, "f")
    assert n.energy_j is None and "no GPU sample for 3.0 s" in n.gap


def _node(name, sm, power, reasons=0, role="server"):
    s = [GpuSample(t, 0, power, sm, 3201, 100, 1, 50, reasons) for t in (0.0, 1.0, 2.0)]
    return node_figures(GpuFile(name, 0.0, "nvidia-smi", tuple(s)), (0.5, 2.0), 3.0, name, "replica 0", role, 0, name)


def test_a_node_low_against_its_roles_peers_is_named():
    nodes = (_node("n1", 1980, 600), _node("n2", 1980, 610), _node("n3", 1215, 430, 0x48), _node("n4", 1980, 605),
             _node("p1", 1200, 300, role="prefill"))
    named = low_nodes(nodes, 10.0, 20.0)
    assert len(named) == 1 and named[0].startswith("n3 (replica 0 node rank 0): SM clock 1215 MHz under load, 39 % "
                                                   "below its peers' 1980 MHz; power per GPU 430 W")
    assert "HW slowdown, HW thermal slowdown (0x48)" in named[0]
    # a slowdown reason alone names a node even when every peer is as slow
    assert low_nodes((_node("a", 1500, 500, 0x4), _node("b", 1500, 500)), 10.0, 20.0)[0].startswith(
        "a (replica 0 node rank 0): clock-event reasons under load: SW power cap")


def test_a_client_that_wants_a_core_is_flagged(tmp_path):
    f = tmp_path / "host.log"
    argv = "\x1f".join(["/venv/bin/python3", "-m", "sglang.bench_serving", "--backend", "vllm"])
    f.write_text("".join(f"T {t:.3f} cpu=97.0 ncpu=2 mem=8.0 files=4000\n"
                         f"P {t:.3f} 4242 cpu=60.0 demand={d} rss=300 fds=20 fdmax=1024 cmd={argv}\n"
                         f"P {t:.3f} 99 cpu=90.0 demand=100.0 rss=10 fds=3 fdmax=1024 cmd=python3\x1f-m\x1fslurm_ab_testbed.emulator\n"
                         for t, d in ((10.0, 120.0), (10.5, 95.0), (11.0, 110.0), (20.0, 5.0))))
    h = host_figures(read_host_file(f), (9.9, 11.1), "sglang.bench_serving", "node01")
    assert (h.client_pid, h.client_samples, h.samples, h.ncpu) == (4242, 3, 3, 2)
    assert abs(h.client_demand_pct - 108.333) < 0.01
    flag = client_flag(h, 90.0, "launch1-tp32/telemetry/host.log")
    assert flag.startswith("suspect bottleneck: the benchmark client (pid 4242 on node01) wanted 108 % of one CPU core")
    assert client_flag(host_figures(read_host_file(f), (19.9, 20.1), "sglang.bench_serving", "node01"), 90.0, "x") is None


def test_a_host_sampler_that_died_is_said_with_its_error(tmp_path):
    """srun --output holds the sampler's stderr too: its traceback's last line is the reason the
    host's samples stop, said when they stop before the pass's window ends."""
    from slurm_ab.collect.telemetry import sampler_died
    f = tmp_path / "host.log"
    f.write_text("T 10.000 cpu=50.0 ncpu=2 mem=8.0 files=4000\nT 11.000 cpu=50.0 ncpu=2 mem=8.0 files=4000\n"
                 "Traceback (most recent call last):\n  File \"<string>\", line 50, in <module>\n"
                 "  File \"<string>\", line 19, in sched\n"
                 "FileNotFoundError: [Errno 2] No such file or directory: '/proc/4711/task'\n")
    h = read_host_file(f)
    assert h.error == "FileNotFoundError: [Errno 2] No such file or directory: '/proc/4711/task'" and h.bad_lines == 4
    assert sampler_died(h, (10.5, 30.0), "telemetry/host.log") == (
        "host sampler: it died 19 s before the window's end: FileNotFoundError: [Errno 2] No such file or "
        "directory: '/proc/4711/task' [telemetry/host.log]")
    assert sampler_died(h, (5.0, 10.8), "x") is None                 # it sampled past the window
    assert sampler_died(h, (20.0, 30.0), "x").startswith("host sampler: it died before the window: ")
    assert sampler_died(read_host_file(tmp_path / "none"), (0, 1), "x") is None     # no file: nothing to say


def _events(*lines: str) -> EventLog:
    return EventLog(tuple(parse_event_line(x, k) for k, x in enumerate(lines, 1)), (), True)


def test_the_window_is_the_benchmark_the_client_measured():
    ev = _events("1000.000 2026-12-03 12:00:00.000 bench_start pass=c8-r1",
                 "1040.000 2026-12-03 12:00:40.000 bench_end pass=c8-r1 rc=0 output_at=1039.250")
    assert pass_window(ev, 20.0) == ((1019.25, 1039.25), "benchmark")
    old = _events("1000.000 2026-12-03 12:00:00.000 bench_start pass=c8-r1",
                  "1040.000 2026-12-03 12:00:40.000 bench_end pass=c8-r1 rc=0")
    assert pass_window(old, 20.0) == ((1000.0, 1040.0), "step")
    exp = load_experiment(Sources("example"), "tp32")
    s = pass_telemetry(LaunchTelemetry("nvidia-smi", {}, {}, None, ""), old, exp, 20.0, 1000, {})
    assert s.energy_j is None and s.gpus == 0 and "node rank" in s.invalid and s.notes[0].startswith(
        "telemetry window: the client step's")


# ---- profiles: schedule, recorded plan, job script, dry-run -------------------------------------------

def test_a_profiled_pass_is_left_out_of_the_timed_passes():
    c = schedule(("tp32", "pp8"), 2, (8,), "counterbalanced", False, 40, launches=2, profile="extra")
    assert [p.key for p in c.launches[0].passes] == ["c8-r1", "c8-r2", "c8-profile"]
    assert [p.key for p in c.launches[2].passes] == ["c8-r3", "c8-r4"]          # each mode's first launch only
    assert [(p.launch, p.mode) for p in c.profiled] == [(1, "tp32"), (2, "pp8")]
    assert all(not p.profile for p in c.passes) and len(c.passes) == 8
    c = schedule(("tp32",), 2, (8,), "counterbalanced", False, 40, profile="c8-r2")
    assert [(p.key, p.profile) for p in c.launches[0].passes] == [("c8-r1", False), ("c8-r2", True)]
    assert Launch.from_dict(c.launches[0].to_dict()) == c.launches[0]
    assert Pass(1, "m", 8, -1, 40, profile=True).spec == "8:-1:40:profile"


def test_a_resubmitted_scripts_schedule_keeps_its_profiled_pass(tmp_path):
    from slurm_ab.model.rundir import open_run
    (tmp_path / "events.log").write_text(
        "1.000 2026-12-03 12:00:00.000 launch_plan launch=1 mode=tp32 dir=launch1-tp32 passes=8:1:40,8:-1:40:profile\n")
    (la,) = open_run(tmp_path).campaign.launches
    assert [(p.key, p.profile) for p in la.passes] == [("c8-r1", False), ("c8-profile", True)]


def test_profile_and_telemetry_settings_are_checked():
    from slurm_ab.model.errors import ConfigErrors
    from slurm_ab.job.campaign_plan import plan_job
    for sets, text in ((("telemetry.source=\"smi\"",), "telemetry.source = 'smi': unknown telemetry source (allowed: nvidia-smi, dcgm, none)"),
                       (('telemetry.nvidia_smi.fields=["index","power.draw"]',), "telemetry.nvidia_smi.fields"),
                       (("telemetry.max_gap_s=0.5",), "must be longer than the sample interval"),
                       (('profile.activities=["GPU","XLA"]',), "unknown activity 'XLA'"),
                       (("profile.roles.decode.num_steps=0",), "profile.roles.decode.num_steps = 0: must be an integer >= 1"),
                       (('profile.target="c4-r1"',), "profile.target = 'c4-r1': no pass of this job has that key")):
        with pytest.raises(ConfigErrors) as e:
            plan_job(Sources("example", (), sets), ["tp32"], "RUN")
        assert text in str(e.value), (sets, str(e.value))


def test_a_pd_jobs_profiled_pass_asks_each_role_for_its_window_and_nsys_wraps_the_servers(tmp_path):
    text = render("pd-1p1d", sets=('profile.target="extra"', "profile.nsys=true", 'profile.activities=["CUDA_PROFILER"]',
                                   "profile.roles.prefill.num_steps=2", "profile.roles.decode.start_step=40"))
    assert "PROFILE_BODY_0_prefill='{\"num_steps\": 2, \"activities\": [\"CUDA_PROFILER\"]}'" in text
    assert "PROFILE_BODY_0_decode='{\"num_steps\": 10, \"start_step\": 40, \"activities\": [\"CUDA_PROFILER\"]}'" in text
    assert "NSYS=(nsys profile '--trace=cuda,nvtx' --capture-range=cudaProfilerApi" in text
    assert "8:1:40:c8-r1:bench-c8-r1.jsonl:logs/client-c8-r1.log 8:-1:40:c8-profile:" in text
    assert re.search(r"^F_NSYS_REPORT='?profiles/nsys-r%s-n%s'?  # replica, node rank$", text, re.M)
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    r = shellcheck(path)
    assert r.returncode == 0, r.stdout


def test_nsys_wrap_puts_nsys_after_the_environment_words(tmp_path):
    from helpers.scripts import layout_formats
    body = (tmp_path / "p.sh")
    static = render("tp32", sets=("profile.nsys=true", 'profile.activities=["CUDA_PROFILER"]'))
    fn = static[static.index("nsys_wrap() {"):]
    fn = fn[:fn.index("\n}\n") + 3]
    body.write_text(layout_formats() + "RUN_DIR=" + str(tmp_path) + "\nNSYS=(nsys profile -x)\n"
                    'rpath() { local fmt=$1; shift; printf "%s/$fmt" "$RUN_DIR" "$@"; }\n' + fn +
                    "cmd=(A=1 B=2 python3 -m sglang.launch_server --tp-size 8)\nnsys_wrap 1\nprintf '%s\\n' \"${cmd[@]}\"\n")
    out = subprocess.run(["bash", str(body)], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:7] == ["A=1", "B=2", "nsys", "profile", "-x", "-o", f"{tmp_path}/profiles/nsys-r1-n%q{{SLURM_NODEID}}"]
    assert out[7:9] == ["python3", "-m"]


def test_dry_run_shows_the_samplers_and_the_profiles(tmp_path):
    from slurm_ab.job.campaign_plan import plan_job
    from slurm_ab.job.render import summary
    plan = plan_job(Sources("example", (), ("profile.nsys=true", 'profile.activities=["CUDA_PROFILER"]',
                                            'profile.target="extra"')), ["tp32"], "RUN")
    text = summary(plan)
    assert "telemetry (nvidia-smi, every 1000 ms): a step on every node of each launch (srun --overlap --mem=0)" in text
    assert "profile: pass c8-profile of launch 1 (tp32), left out of every statistic" in text
    assert "needs nsys on every node; the local testbed has none" in text
    assert re.search(r"replica 0 \(het group 0\).*\bnsys profile .* -o '?<launch>/profiles/nsys-r0-n%q\{SLURM_NODEID\}'? .*"
                     r"python3 -m sglang.launch_server", text)
    none = summary(plan_job(Sources("example", (), ('telemetry.source="none"',)), ["tp32"], "RUN"))
    assert 'telemetry: none (telemetry.source = "none"' in none


def test_a_calendar_sanity_of_the_stamp_helper():
    assert _stamp(calendar.timegm((2026, 12, 3, 7, 51, 55, 0, 0, 0)) + 0.011, 0) == "2026/12/03 07:51:55.011"


def test_golden_dcgm_samplers_and_a_profiled_pass_with_nsys():
    """The generated part of a job with DCGM telemetry (an exporter started per node), a profiled
    pass and nsys (tests/golden/: the feature's variables, formats and passes)."""
    from helpers.scripts import check_golden, generated
    text = render("tp32", sets=('telemetry.source="dcgm"', 'telemetry.dcgm.exporter_command=["dcgm-exporter", "--collect-interval=100"]',
                                'profile.target="extra"', "profile.nsys=true", 'profile.activities=["CUDA_PROFILER"]'))
    check_golden("telemetry-dcgm-profile-nsys-tp32.sbatch", generated(text))


def test_the_host_sampler_follows_a_process_that_became_the_jobs_by_exec(tmp_path):
    """The packaged host sampler run for real: a process first seen without the job's id (as a
    Slurm step between fork and exec) is asked again after its exec and sampled; a process of
    another job never is."""
    import os
    import sys
    import tomllib
    from helpers import ROOT
    from slurm_ab.parse.telemetry import read_host_file
    cmd = tomllib.loads((ROOT / "slurm_ab" / "data" / "experiment.toml").read_text())["telemetry"]["host_command"]
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    burn = "import sys, time\nt = time.time()\nwhile time.time() - t < float(sys.argv[1]): pass\n"
    out = tmp_path / "host.log"
    with open(out, "w") as f:
        sampler = subprocess.Popen([*cmd, "0.2"], env={**env, "SLURM_JOB_ID": "34034"}, stdout=f)
        try:
            time.sleep(0.5)
            later = subprocess.Popen(["sh", "-c", f'sleep 0.8; exec env SLURM_JOB_ID=34034 "{sys.executable}" '
                                      f'-c "$0" 2.0 job-marker', burn], env=env)
            other = subprocess.Popen([sys.executable, "-c", burn, "2.0", "other-marker"], env=env)
            later.wait(20)
            other.wait(20)
            time.sleep(0.5)
        finally:
            sampler.terminate()
            sampler.wait(10)
    procs = read_host_file(out).procs
    mine = [p for p in procs if "job-marker" in p.argv]
    assert len(mine) >= 2 and all(p.pid == later.pid for p in mine), out.read_text()[-2000:]
    assert not [p for p in procs if "other-marker" in p.argv]


def test_the_pages_lines_break_where_the_sampler_saw_nothing():
    from slurm_ab.report.telemetry import broken_at_gaps
    d = {"t": [0.0, 0.2, 0.4, 4.6, 4.8], "power": [100, 110, 120, 130, 140], "sm": [1, 2, 3, 4, 5]}
    assert broken_at_gaps(d) == {"t": [0.0, 0.2, 0.4, 2.5, 4.6, 4.8], "power": [100, 110, 120, None, 130, 140],
                                 "sm": [1, 2, 3, None, 4, 5]}
    assert broken_at_gaps({"t": [0.0, 0.2, 0.4], "power": [1, 2, 3], "sm": [1, 2, 3]})["power"] == [1, 2, 3]


def test_an_open_loop_campaigns_profiled_pass_keeps_its_rate(tmp_path):
    """Issue 33's rates and issue 34's profiles in one pass spec: an open-loop campaign's extra
    profiled pass runs at its first rate (RATE before the profile flag in LAUNCH_PASSES and in the
    recorded plan, read back as both); a capacity search has no pass to profile (refused)."""
    from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
    from slurm_ab.model.errors import ConfigErrors
    from slurm_ab.model.rundir import open_run
    c = schedule(("tp32",), 1, (), "blocked", False, 40, rates=(2.5, 4.0), profile="extra")
    (la,) = c.launches
    assert [(p.key, p.rate, p.profile) for p in la.passes] == \
        [("q2.5-r1", 2.5, False), ("q4-r1", 4.0, False), ("q2.5-profile", 2.5, True)]
    assert [p.key for p in c.passes] == ["q2.5-r1", "q4-r1"] and la.passes[-1].spec == "40:-1:40:2.5:profile"
    plan = plan_job(Sources("example", (), ("paths.results=/r", 'profile.target="extra"')), ["tp32"], "R",
                    CampaignOptions(rates="2.5,4"))
    assert plan.campaign.launches[0].passes[-1].spec == \
        "40:-1:40:q2.5-profile:bench-q2.5-profile.jsonl:logs/client-q2.5-profile.log:2.5:profile"
    (tmp_path / "events.log").write_text(
        "1.000 2026-12-03 12:00:00.000 launch_plan launch=1 mode=tp32 dir=launch1-tp32 "
        "passes=40:1:40:2.5,40:-1:40:2.5:profile,8:-1:40:profile\n")
    (back,) = open_run(tmp_path).campaign.launches
    assert [(p.key, p.rate, p.profile) for p in back.passes] == \
        [("q2.5-r1", 2.5, False), ("q2.5-profile", 2.5, True), ("c8-profile", None, True)]
    with pytest.raises(ConfigErrors) as e:
        plan_job(Sources("example", (), ("paths.results=/r", "capacity.slo_tpot_ms=60", 'profile.target="extra"')),
                 ["tp32"], "R", CampaignOptions(capacity=True))
    assert "profile.target = 'extra': a capacity search's probes are all it runs" in str(e.value)


def test_profile_target_takes_every_pass_key_the_plan_makes():
    """profile.target is checked against campaign.PASS_KEY, the pattern of what Pass.key makes:
    an open-loop pass (q4-r1, q2.5-r2) may be profiled as a closed-loop one (the old pattern, a
    copy of the closed-loop keys only, refused them); every key of closed, open-loop, burn-in,
    profiled and probe passes matches it, and a name no pass can have is still refused."""
    from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
    from slurm_ab.model.campaign import PASS_KEY, schedule
    from slurm_ab.model.errors import ConfigErrors
    plan = plan_job(Sources("example", (), ("paths.results=/r", 'profile.target="q4-r1"')), ["tp32"], "R",
                    CampaignOptions(rates="2.5,4", repeats=2))
    assert [p.key for p in plan.campaign.campaign.launches[0].passes if p.profile] == ["q4-r1"]
    keys = {p.key for concs, rates in (((8, 16), ()), ((8, 16), (0.25, 4.0)), ((), (12.5, 4.0)))
            for prof in ("", "extra")
            for la in schedule(("tp32",), 2, concs, "blocked", True, 40, rates=rates, profile=prof).launches
            for p in la.passes}
    keys |= {p.key for la in plan_job(Sources("example", (), ("paths.results=/r", "capacity.slo_tpot_ms=60")),
                                      ["tp32"], "R", CampaignOptions(capacity=True)).campaign.campaign.launches
             for p in la.passes}
    assert {"c8-r1", "c8-burnin", "c8-profile", "q0.25-r2", "q12.5-burnin", "q12.5-profile", "probe1"} <= keys
    assert all(PASS_KEY.fullmatch(k) for k in keys), keys
    for bad in ("q4", "c8-r", "q-r1", "x8-r1", "q4-r1 "):
        with pytest.raises(ConfigErrors) as e:
            plan_job(Sources("example", (), ("paths.results=/r", f'profile.target="{bad}"')), ["tp32"], "R")
        assert "not a pass to profile" in str(e.value), bad


def _host_sampler_with(tmp_path, wrapper: str, job_id: str, busy_s: float):
    """The packaged host sampler (telemetry.host_command) run for real under WRAPPER (Python that
    patches what the sampler reads, then runs it), with a process of the job ('job-marker') busy
    for BUSY_S seconds: (its samples, that process, whether the sampler outlived it, its stderr)."""
    import sys
    import tomllib
    from helpers import ROOT
    cmd = tomllib.loads((ROOT / "slurm_ab" / "data" / "experiment.toml").read_text())["telemetry"]["host_command"]
    assert cmd[:2] == ["python3", "-c"]
    burn = "import sys, time\nt = time.time()\nwhile time.time() - t < float(sys.argv[1]): pass\n"
    out = tmp_path / "host.log"
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    with open(out, "w") as f:
        sampler = subprocess.Popen([sys.executable, "-c", wrapper + "exec(compile(sys.argv.pop(1), 'host_command', "
                                    "'exec'))\n", cmd[2], "0.2"], env={**env, "SLURM_JOB_ID": job_id},
                                   stdout=f, stderr=subprocess.PIPE)
        try:
            time.sleep(0.5)
            mine = subprocess.Popen([sys.executable, "-c", burn, str(busy_s), "job-marker"],
                                    env={**env, "SLURM_JOB_ID": job_id})
            mine.wait(20)
            time.sleep(0.4)
            alive = sampler.poll() is None
        finally:
            sampler.terminate()
            _, err = sampler.communicate(timeout=10)
    return out, mine, alive, err.decode(errors="replace")


def test_the_host_sampler_asks_again_when_an_environment_reads_empty(tmp_path):
    """In an exec Linux sets the new name before it maps the new environment (fs/exec.c
    begin_new_exec, then binfmt_elf.c create_elf_tables): /proc/PID/environ reads empty in between.
    The packaged sampler, its first read of the job's process made empty as in that window, still
    samples the process (it used to cache 'not the job's' for good: a loaded CI node's client went
    unsampled)."""
    window = ("import builtins, io, sys\n"
              "real, faked = builtins.open, set()\n"
              "def fake(path, *a, **k):\n"
              "    p = str(path)\n"
              "    if p.endswith('/environ') and p not in faked:\n"
              "        try:\n"
              "            argv = real(p[:-len('environ')] + 'cmdline', 'rb').read()\n"
              "        except OSError:\n"
              "            argv = b''\n"
              "        if b'job-marker' in argv:\n"
              "            faked.add(p)\n"
              "            return io.BytesIO(b'')\n"
              "    return real(path, *a, **k)\n"
              "builtins.open = fake\n")
    out, mine, _, _ = _host_sampler_with(tmp_path, window, "34035", 2.0)
    seen = [p for p in read_host_file(out).procs if "job-marker" in p.argv]
    assert len(seen) >= 2 and all(p.pid == mine.pid for p in seen), out.read_text()[-2000:]


def test_the_host_sampler_outlives_a_process_that_ends_between_two_reads(tmp_path):
    """A process of the job may end between the sampler's read of /proc/PID/stat and its listing
    of /proc/PID/task (the job's curl health probes live milliseconds). Made certain here: the
    listing of a 'job-marker' process's tasks raises as for a process that just ended. The
    packaged sampler used to die of it (FileNotFoundError, exit 1: in CI srun printed 'node10: task
    0: Exited with exit code 1' before a job's FATAL, and the host's telemetry ended there)."""
    gone = ("import os, sys\n"
            "real = os.listdir\n"
            "def fake(path='.'):\n"
            "    p = str(path)\n"
            "    if p.startswith('/proc/') and p.endswith('/task'):\n"
            "        try:\n"
            "            argv = open(p[:-len('task')] + 'cmdline', 'rb').read()\n"
            "        except OSError:\n"
            "            argv = b''\n"
            "        if b'job-marker' in argv:\n"
            "            raise FileNotFoundError(2, 'No such file or directory', p)\n"
            "    return real(path)\n"
            "os.listdir = fake\n")
    out, _, alive, err = _host_sampler_with(tmp_path, gone, "34036", 1.5)
    assert alive, err[-2000:]
    host = read_host_file(out)
    assert host.bad_lines == 0 and len(host.node) >= 8, out.read_text()[-2000:]   # ~2.4 s at 0.2 s
    assert [p for p in host.procs if "job-marker" in p.argv], out.read_text()[-2000:]
