"""A stand-in for NVIDIA's ``dcgm-exporter`` on the local nodes: ``GET /metrics`` (default port 9400).

``python3 -m slurm_ab_testbed.fake_dcgm [--port 9400] [--address 0.0.0.0]`` serves the families of
dcgm-exporter's ``etc/default-counters.csv`` (NVIDIA/dcgm-exporter) with its labels (``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``), one
HELP/TYPE pair per family, values from the same script as the fake nvidia-smi (gpu_activity.py,
fake_gpus.toml, its faults): power and utilisation averaged over the last second,
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` the exact energy in mJ since the exporter started (its
"boot"), so the difference of two scrapes is exactly ``gpu_activity.expected_energy_j`` of the
window (per GPU). Families the emulation has no value for (PCIe, NVLink, XID, ...) read 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .fake_gpus import Sample, count
from .gpu_activity import ActivityReader, activity_path, load_config, node_name, parse_fault, power_w

# (field, type, help) as dcgm-exporter's default-counters.csv lists them
COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "Total number of bytes transmitted through PCIe TX (in KB) via NVML."),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "Total number of bytes received through PCIe RX (in KB) via NVML."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)


class Exporter:
    def __init__(self, env=os.environ):
        self.cfg = load_config()
        self.fault = parse_fault(env, self.cfg)
        self.gpus = count(env)
        self.host = node_name(env)
        self.reader = ActivityReader(activity_path(env))
        self.boot = time.time()

    def render(self, t: float | None = None) -> str:
        t = time.time() if t is None else t
        act = self.reader.refresh()
        g = self.cfg["gpu"]
        window = float(g["avg_window_s"])
        u = min(1.0, max(0.0, act.busy_seconds(t - window, t) / window))
        idle = power_w(0.0, self.fault, self.cfg)
        energy_mj = 1000 * (idle * (t - self.boot) + (power_w(1.0, self.fault, self.cfg) - idle)
                            * act.busy_seconds(self.boot, t))
        used = act.memory_used_mib if act.up else 0
        out = []
        for field, kind, help_ in COUNTERS:
            out += [f"# HELP {field} {help_}", f"# TYPE {field} {kind}"]
            for i in range(self.gpus):
                s = Sample(i, t, u, act.busy_at(t), act, self.fault, self.cfg)
                value = {
                    "DCGM_FI_DEV_SM_CLOCK": s.sm_clock(), "DCGM_FI_DEV_MEM_CLOCK": g["mem_clock_mhz"],
                    "DCGM_FI_DEV_MEMORY_TEMP": s.temp("mem_temp_idle_c", "mem_temp_busy_c"),
                    "DCGM_FI_DEV_GPU_TEMP": s.temp("temp_idle_c", "temp_busy_c"),
                    "DCGM_FI_DEV_POWER_USAGE": f"{power_w(u, self.fault, self.cfg):.6f}",
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(energy_mj),
                    "DCGM_FI_DEV_GPU_UTIL": int(round(100 * u)),
                    "DCGM_FI_DEV_MEM_COPY_UTIL": int(round(g["memory_util_busy_pct"] * u)),
                    "DCGM_FI_DEV_FB_FREE": g["memory_total_mib"] - used, "DCGM_FI_DEV_FB_USED": used,
                }.get(field, 0)
                labels = (f'gpu="{i}",UUID="GPU-00000000-0000-0000-0000-{i:012d}",'
                          f'pci_bus_id="00000000:{0x18 + 0x10 * i:02X}:00.0",device="nvidia{i}",'
                          f'modelName="{g["name"]}",Hostname="{self.host}",DCGM_FI_DRIVER_VERSION="{g["driver_version"]}"')
                out.append(f"{field}{{{labels}}} {value}")
        return "\n".join(out) + "\n"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args) -> None:
        pass

    def do_GET(self):
        if self.path.split("?")[0] != "/metrics":
            self.send_response(404)
            self.end_headers()
            return
        body = self.server.exporter.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m slurm_ab_testbed.fake_dcgm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=9400)
    a = ap.parse_args(argv)
    try:
        exporter = Exporter()
    except ValueError as e:
        print(f"fake_dcgm: {e}", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer((a.address, a.port), _Handler)
    server.daemon_threads = True
    server.exporter = exporter  # type: ignore[attr-defined]
    print(f"Starting webserver on {a.address}:{a.port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
