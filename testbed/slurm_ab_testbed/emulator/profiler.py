"""``/start_profile`` and ``/stop_profile`` as SGLang 0.5.23 serves them, with a small trace per rank.

Follows ``managers/scheduler_components/profiler_manager.py`` (the default path,
``SGLANG_PROFILE_V2`` unset), ``managers/io_struct.py`` (``ProfileReq``: output_dir, start_step,
num_steps, activities, profile_by_stage, with_stack, record_shapes, profile_id, merge_profiles,
profile_prefix, profile_stages, detailed_annotations), ``managers/tokenizer_control_mixin.py``
(``profile_id`` defaults to ``str(time.time())``; a failure raises RuntimeError, so HTTP 500) and
``entrypoints/http_server.py`` (GET or POST, an optional JSON body; ``Start profiling.\\n`` /
``Stop profiling. This will take some time.\\n``):

- no ``start_step`` and not ``profile_by_stage``: recording starts at once; with ``num_steps`` N it
  stops by itself when the forward after the N-th recorded one begins (``profiler_target_forward_ct
  = forward_ct + N + 1``, checked at each run_batch), else at ``/stop_profile``;
- ``start_step`` S: recording covers forwards max(S, forward_ct + 1) .. that + N - 1;
- ``profile_by_stage`` with ``num_steps`` N: the first prefill batch starts a prefill trace (suffix
  ``-EXTEND``), which stops after N prefill batches or at the first decode batch; the first decode
  batch starts a decode trace (``-DECODE``) for N decode batches;
- errors: ``Profiling is already in progress. Call /stop_profile first.`` and ``Profiling is not
  in progress. Call /start_profile first.``;
- ``output_dir`` defaults to ``$SGLANG_TORCH_PROFILER_DIR``, else ``/tmp``; ``activities`` to
  ``["CPU", "GPU"]``; every scheduler (every GPU rank, on every node) logs ``Profiling starts[ for
  EXTEND|DECODE]. Traces will be saved to: DIR (with profile id: ID)``, ``Stop profiling[-STAGE]...``
  and ``Profiling done. Traces are saved to: DIR`` and writes
  ``[PREFIX-]ID-TP-t[-DP-d][-PP-p][-EP-e][-STAGE].trace.json.gz`` (DP/PP/EP only when that size is
  > 1), a gzipped Chrome trace like torch's export_chrome_trace (here: one event per recorded
  forward and its emulated kernel); ``MEM`` adds ``[PREFIX-]TIME-TP-t-memory[-STAGE].pickle``.

Node rank 0 owns the engine and the state; it sends start/stop (with the recorded forwards) to the
other nodes of its replica, which log and write their own ranks' files. Files are written on a
thread of their own so the scheduler does not wait (SGLang's export blocks it: seconds, real time).
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

STAGE_NAMES = {"prefill": "EXTEND", "decode": "DECODE"}
ALREADY = "Profiling is already in progress. Call /stop_profile first."
NOT_RUNNING = "Profiling is not in progress. Call /start_profile first."


class ProfileError(RuntimeError):
    """A profile request SGLang refuses (its tokenizer manager raises RuntimeError: HTTP 500)."""


@dataclass(frozen=True)
class RankName:
    """One GPU rank's file name parts (profiler_manager._stop_profile's filename_parts)."""
    tp: int
    dp: Optional[int] = None
    pp: Optional[int] = None
    ep: Optional[int] = None

    def parts(self) -> list[str]:
        out = [f"TP-{self.tp}"]
        for tag, v in (("DP", self.dp), ("PP", self.pp), ("EP", self.ep)):
            if v is not None:
                out.append(f"{tag}-{v}")
        return out


def rank_names(topo, ranks) -> list[RankName]:
    """The file name parts of the given topology ranks (topology.Rank: pp_rank, tp_rank)."""
    out = []
    for r in ranks:
        dp = (r.tp_rank // max(1, topo.tp // topo.dp) if topo.dp_attention else 0) if topo.dp > 1 else None
        out.append(RankName(r.tp_rank, dp, r.pp_rank if topo.pp > 1 else None,
                            r.tp_rank // max(1, topo.tp // topo.ep) if topo.ep > 1 else None))
    return out


def trace_name(profile_id: str, rank: RankName, prefix: str = "", stage: str = "") -> str:
    return (prefix + "-" if prefix else "") + "-".join([profile_id, *rank.parts()]) + \
        (f"-{stage}" if stage else "") + ".trace.json.gz"


def write_traces(directory: str, profile_id: str, prefix: str, stage: str, activities: list[str],
                 ranks: list[RankName], events: list[dict]) -> list[Path]:
    """Every local rank's trace file (and memory snapshot with MEM); returns the paths written."""
    out_dir = Path(directory).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, rank in enumerate(ranks):
        path = out_dir / trace_name(profile_id, rank, prefix, stage)
        if "CPU" in activities or "GPU" in activities:
            trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200 (emulated)"}],
                     "record_shapes": 0, "with_stack": 1, "displayTimeUnit": "ms",
                     "distributedInfo": {"backend": "nccl", "rank": rank.tp, "world_size": len(ranks)},
                     "traceEvents": [dict(e, pid=os.getpid(), tid=i) for e in events], "traceName": str(path)}
            with gzip.open(path, "wt", encoding="utf-8") as f:
                json.dump(trace, f)
            written.append(path)
        if "MEM" in activities:
            mem = out_dir / ((prefix + "-" if prefix else "") + f"{time.time()}-TP-{rank.tp}-memory"
                             + (f"-{stage}" if stage else "") + ".pickle")
            with open(mem, "wb") as f:
                pickle.dump({"segments": [], "device_traces": [], "emulated": True}, f)
            written.append(mem)
    return written


def forward_events(kind: str, forward_ct: int, start: float, duration: float, batch: int, tokens: int) -> list[dict]:
    """A recorded forward as torch's trace shows it: the scheduler's CPU span and its GPU kernel."""
    ts, dur = int(start * 1e6), max(1, int(duration * 1e6))
    args = {"forward_ct": forward_ct, "batch_size": batch, "tokens": tokens}
    return [{"ph": "X", "cat": "user_annotation", "name": f"run_batch_{kind}", "ts": ts, "dur": dur, "args": args},
            {"ph": "X", "cat": "kernel", "name": f"emulated_{kind}_forward", "ts": ts + 5, "dur": max(1, dur - 10),
             "args": args}]


@dataclass
class _State:
    output_dir: str = "/tmp"
    profile_id: str = ""
    prefix: str = ""
    activities: list = field(default_factory=lambda: ["CPU", "GPU"])
    by_stage: bool = False
    start_ct: Optional[int] = None
    target_ct: Optional[int] = None
    prefill_ct: Optional[int] = None
    decode_ct: Optional[int] = None
    target_prefill: Optional[int] = None
    target_decode: Optional[int] = None


class Profiler:
    """Node rank 0's profiler (one per engine). ``log`` logs a line for every local GPU rank;
    ``broadcast`` sends a message to the replica's other nodes (None on one node)."""

    def __init__(self, log: Callable[[str], None], ranks: list[RankName],
                 broadcast: Optional[Callable[[dict], None]] = None, env=os.environ):
        self.log = log
        self.ranks = ranks
        self.broadcast = broadcast
        self.env = env
        self.lock = threading.Lock()
        self.state: Optional[_State] = None
        self.in_progress = False
        self.stage = ""
        self.events: list[dict] = []
        self.forward_ct = 0
        self.writers: list[threading.Thread] = []

    # ---- requests (HTTP threads) ---------------------------------------------------------------
    def start(self, body: Optional[dict]) -> None:
        """POST /start_profile (ProfileReq fields); raises ProfileError as SGLang answers 500."""
        b = body or {}
        with self.lock:
            if self.in_progress:
                raise ProfileError(ALREADY)
            s = _State(output_dir=b.get("output_dir") or self.env.get("SGLANG_TORCH_PROFILER_DIR", "/tmp"),
                       profile_id=str(b.get("profile_id") or time.time()), prefix=b.get("profile_prefix") or "",
                       activities=list(b.get("activities") or ["CPU", "GPU"]),
                       by_stage=bool(b.get("profile_by_stage")))
            start_step, num_steps = b.get("start_step"), b.get("num_steps")
            if start_step:
                s.start_ct = max(int(start_step), self.forward_ct + 1)
            if num_steps:
                n = int(num_steps)
                if s.by_stage:
                    s.prefill_ct = s.decode_ct = 0
                    s.target_prefill = s.target_decode = n
                elif start_step:
                    s.target_ct = s.start_ct + n
                else:
                    s.target_ct = self.forward_ct + n + 1
            self.state = s
            if not s.by_stage and not start_step:
                self._start("")

    def stop(self) -> None:
        """POST /stop_profile."""
        with self.lock:
            if not self.in_progress:
                raise ProfileError(NOT_RUNNING)
            self._stop(self.stage)

    # ---- the scheduler (engine thread), each forward before it runs ---------------------------
    def on_forward(self, kind: str, start: float, duration: float, batch: int, tokens: int) -> None:
        """profiler_manager._profile_batch_predicate, then record the forward if recording."""
        with self.lock:
            self.forward_ct += 1
            s = self.state
            if s is not None:
                self._predicate(s, kind)
            if self.in_progress:
                self.events += forward_events(kind, self.forward_ct, start, duration, batch, tokens)

    def _predicate(self, s: _State, kind: str) -> None:
        if s.by_stage:
            if s.prefill_ct is None:          # profile_by_stage without num_steps: never triggers
                return
            stage = STAGE_NAMES[kind]
            if kind == "prefill":
                if s.prefill_ct == 0:
                    self._start(stage)
                s.prefill_ct += 1
                if s.prefill_ct > s.target_prefill and self.in_progress:
                    self._stop(stage)
            else:
                if s.decode_ct == 0:
                    if self.in_progress:
                        self._stop("EXTEND")              # a prefill capture must not absorb decode steps
                    self._start(stage)
                s.decode_ct += 1
                if s.decode_ct > s.target_decode and self.in_progress:
                    self._stop(stage)
            return
        if s.target_ct and s.target_ct <= self.forward_ct and self.in_progress:
            self._stop("")
        if s.start_ct and s.start_ct == self.forward_ct:
            self._start("")

    # ---- start / stop (under the lock) ---------------------------------------------------------
    def _start(self, stage: str) -> None:
        s = self.state
        self.in_progress, self.stage, self.events = True, stage, []
        msg = {"t": "profile", "op": "start", "dir": s.output_dir, "id": s.profile_id, "stage": stage}
        log_start(self.log, msg)
        if self.broadcast is not None:
            self.broadcast(msg)

    def _stop(self, stage: str) -> None:
        s = self.state
        msg = {"t": "profile", "op": "stop", "dir": s.output_dir, "id": s.profile_id, "stage": stage,
               "prefix": s.prefix, "activities": s.activities, "events": self.events}
        self.in_progress, self.stage, self.events = False, "", []
        if not s.by_stage:
            s.start_ct = None
        if self.broadcast is not None:
            self.broadcast(msg)
        t = threading.Thread(target=dump, args=(self.log, self.ranks, msg), name="profile-export", daemon=True)
        self.writers.append(t)
        t.start()

    def wait_written(self, timeout: float = 30.0) -> None:
        """Tests: the trace files of every stop so far are on disk."""
        for t in list(self.writers):
            t.join(timeout)


def log_start(log: Callable[[str], None], msg: dict) -> None:
    stage = f" for {msg['stage']}" if msg["stage"] else ""
    log(f"Profiling starts{stage}. Traces will be saved to: {Path(msg['dir']).expanduser()} "
        f"(with profile id: {msg['id']})")


def dump(log: Callable[[str], None], ranks: list[RankName], msg: dict) -> None:
    """A stop on one node: its log lines and its ranks' files (node rank 0 and the others alike)."""
    log("Stop profiling" + (f"-{msg['stage']}" if msg["stage"] else "") + "...")
    try:
        write_traces(msg["dir"], msg["id"], msg.get("prefix", ""), msg["stage"], msg.get("activities") or [],
                     ranks, msg.get("events") or [])
    except OSError as e:
        log(f"Failed to save the profile: {e}")
        return
    log(f"Profiling done. Traces are saved to: {Path(msg['dir']).expanduser()}")


def on_message(log: Callable[[str], None], ranks: list[RankName], msg: dict) -> None:
    """A node rank >= 1 hears node rank 0's start or stop."""
    if msg.get("op") == "start":
        log_start(log, msg)
    elif msg.get("op") == "stop":
        threading.Thread(target=dump, args=(log, ranks, msg), name="profile-export", daemon=True).start()
