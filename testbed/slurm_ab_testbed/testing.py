"""Helpers to run emulated nodes as subprocesses (tests, local experiments).

Every process started here is tracked and ended by ``EmuProcs.close()`` (SIGTERM, then SIGKILL),
so a failing test leaves nothing behind. Waits are bounded.
"""
from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

# The log regexes of shared/research/sglang.md §3, verbatim: tests assert the emulator's lines with them.
PREFIX = re.compile(
    r'^(?:\(\w+ pid=\d+(?:,\s*ip=[\d.]+)?\)\s*)?'
    r'\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)'
    r'(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)\]\s+'
    r'(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?[.,]\s+(?P<body>.*?)\s*,?\s*$')
DECODE_RE = re.compile(
    r'Decode batch(?: \[\d+\])?[.,] #running-req: (?P<running_req>\d+), '
    r'(?:#(?:full )?token: (?P<num_token>\d+), )?'
    r'.*?token usage: (?P<token_usage>[\d.]+), '
    r'(?:.*?accept len: (?P<accept_len>[\d.]+), )?'
    r'(?:accept rate: (?P<accept_rate>[\d.]+), )?'
    r'.*?(?:cuda|cpu|npu|musa) graph: (?P<graph>True|False), '
    r'gen throughput \(token/s\): (?P<gen_throughput>[\d.]+), '
    r'#queue-req: (?P<queue_req>\d+)')
PREFILL_RE = re.compile(
    r'Prefill batch(?: \[\d+\])?[.,] #new-seq: (?P<new_seq>\d+), '
    r'#new-token: (?P<new_token>\d+), #cached-token: (?P<cached_token>\d+), '
    r'.*?token usage: (?P<token_usage>[\d.]+), '
    r'.*?#running-req: (?P<running_req>\d+), #queue-req: (?P<queue_req>\d+)'
    r'(?:.*?input throughput \(token/s\): (?P<input_throughput>[\d.]+))?')

# DFLASH flags of the seed's tp32-dflash mode (draft path is never opened).
SPEC = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d", "--speculative-num-draft-tokens", "16"]

FAST_ENV = {"SLURM_AB_EMU_TIME_SCALE": "0.005", "PYTHONUNBUFFERED": "1"}


# Ports for the servers a test starts, below the kernel's ephemeral range (ip_local_port_range,
# 32768-60999 by default): a port the kernel handed out for port 0 and was released was free only
# until the kernel handed it out again, to another server's own port-0 listener or to a client
# connection's local end ('address already in use' when the test's server bound it: seen in a
# full run, test_emulator_pd's decode on 127.0.0.3). Ports here are never handed out that way;
# each is checked free on every address, and chosen at random so tests running side by side
# rarely pick the same one.
TEST_PORTS = range(10000, 20000)


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct ports of TEST_PORTS free on every address (held open together so they differ)."""
    socks, ports = [], []
    try:
        for port in random.sample(TEST_PORTS, len(TEST_PORTS)):
            s = socket.socket()
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
            if len(ports) == n:
                return ports
        raise RuntimeError(f"fewer than {n} free ports in {TEST_PORTS}")
    finally:
        for s in socks:
            s.close()


class Proc:
    def __init__(self, popen: subprocess.Popen, log: Path, name: str):
        self.p = popen
        self.log = log
        self.name = name

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_log(self, needle: str, timeout: float = 20.0) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if needle in self.text():
                return True
            if self.p.poll() is not None:
                return needle in self.text()
            time.sleep(0.05)
        return False

    def wait_exit(self, timeout: float = 20.0) -> Optional[int]:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    @property
    def pid(self) -> int:
        return self.p.pid


class EmuProcs:
    """Start emulator (or other) processes with logs in a directory; close() ends them all."""

    def __init__(self, log_dir: Optional[str] = None):
        self.dir = Path(log_dir or tempfile.mkdtemp(prefix="emu-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []

    def start(self, argv: Sequence[str], name: str, env: Optional[dict] = None, module: bool = True) -> Proc:
        full_env = dict(os.environ)
        full_env.update(FAST_ENV)
        full_env.update(env or {})
        cmd = [sys.executable, "-m", "slurm_ab_testbed.emulator", *argv] if module else list(argv)
        log = self.dir / f"{name}.log"
        fh = open(log, "wb")
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
                             cwd=str(Path(__file__).resolve().parents[2]))
        fh.close()
        proc = Proc(p, log, name)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.p.poll() is None:
                try:
                    os.killpg(proc.p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 5
        for proc in self.procs:
            try:
                proc.p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.p.wait(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def wait_healthy(base_url: str, timeout: float = 30.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if http_get(base_url + "/health", 2.0)[0] == 200:
            return True
        time.sleep(0.1)
    return False
