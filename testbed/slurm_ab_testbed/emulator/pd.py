"""Prefill/decode (PD) disaggregation as SGLang 0.5.23 does it, for the emulator's two roles.

A request reaches a prefill server and a decode server at the same time (the PD router injects
``bootstrap_host`` = the prefill's host, ``bootstrap_port`` = its bootstrap port or null, and a
random ``bootstrap_room``, in /generate and in the OpenAI bodies alike). The decode asks the
prefill's bootstrap server (pd_bootstrap) for the prefill's layout and rank endpoint, reserves KV,
and sends its destination over the side channel (pd_transfer); the prefill, which waited for that
before computing (optimistic_prefill_attempts = 0), runs the prompt, samples the first token, pushes
the KV (the model's KV bytes for the prompt, on every node pair at once: pd_kv) and answers the
router once the decode acknowledged it; the decode streams the first token and decodes the rest.
Requests with the fake host ``2.2.2.2`` (SGLang's own warm-up and /health) touch no peer, which is
why both roles report healthy while P<->D transfer is broken.

Modules: pd_args (flags, rules), pd_bootstrap (registry server and client), pd_transfer (TCP
channels), pd_prefill / pd_decode (the roles), pd_core (their scheduler cores), pd_metrics. This
module: what both roles share (timeouts from SGLang's environment variables, the local IP as
SGLang finds it, the request's bootstrap fields, failure texts), the transfer-engine start-up
faults and the PD warm-up.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from .pd_metrics import PdMetrics

FAKE_BOOTSTRAP_HOST = "2.2.2.2"
SITE = "/usr/local/lib/python3.12/dist-packages/sglang/srt"


@dataclass(frozen=True)
class PdEnv:
    """SGLang's PD timeouts (``srt/environ.py``), real seconds, never scaled by the time scale."""
    bootstrap_timeout: float = 300.0
    waiting_timeout: float = 300.0
    heartbeat_interval: float = 5.0
    heartbeat_max_failure: int = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "PdEnv":
        def num(name, default, cast=float):
            try:
                return cast(env.get(name, "") or default)
            except ValueError:
                return default
        return cls(num("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300, int),
                   num("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300, int),
                   max(num("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0), 2.0),
                   max(num("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2, int), 1))


@dataclass(frozen=True)
class Bootstrap:
    """A request's ``bootstrap_host/port/room`` (GenerateReqInput, OpenAI PDRoutingFields)."""
    host: Optional[str]
    port: int
    room: Optional[int]

    @property
    def fake(self) -> bool:
        return self.host == FAKE_BOOTSTRAP_HOST

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_body(cls, body: dict, own_port: int) -> "Bootstrap":
        def one(v):
            return v[0] if isinstance(v, list) and v else v
        port = one(body.get("bootstrap_port"))   # null: this server's --disaggregation-bootstrap-port
        room = one(body.get("bootstrap_room"))
        return cls(one(body.get("bootstrap_host")), int(port) if port is not None else own_port,
                   int(room) if room is not None else None)


@dataclass
class RoleContext:
    """What a PD role needs from its node: arguments, costs, logging per GPU rank, how to die."""
    args: object                           # cli_args.ServerArgs
    knobs: object                          # knobs.Knobs
    costs: object                          # costs.Costs
    sink: object                           # logfmt.LogSink
    ranks: list                            # [(tp_rank, log prefix)] of this node's GPU ranks
    fatal: Callable[[str], None]           # "Scheduler hit an exception: <traceback>" and exit
    model_config: dict = field(default_factory=dict)   # the model's config.json (its KV size: pd_kv)
    env: PdEnv = field(default_factory=PdEnv.from_env)
    metrics: PdMetrics = field(default_factory=PdMetrics)
    warn_once: "Once" = field(default_factory=lambda: Once())

    def log(self, msg: str) -> None:
        """A scheduler log line of the first local rank (TP0 on the leader)."""
        self.sink.log(msg, self.ranks[0][1])

    def log_ranks(self, message: Callable[[int], str]) -> None:
        """The same event logged by every local GPU rank's scheduler (each with its tp_rank)."""
        for tp_rank, prefix in self.ranks:
            self.sink.log(message(tp_rank), prefix)


def routed_dp_rank(body: dict, args) -> Optional[int]:
    """The DP worker a request names (GenerateReqInput.routed_dp_rank, or its deprecated alias
    data_parallel_rank that sgl-model-gateway's dp-aware mode injects), within the server's DP
    ranks; None: the server's own load balancing."""
    v = body.get("routed_dp_rank", body.get("data_parallel_rank"))
    dp = args.dp_size if args.enable_dp_attention else 1
    if isinstance(v, list):
        v = v[0] if v else None
    try:
        rank = int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
    return rank if rank is not None and 0 <= rank < dp else None


def kv_error(room, reason: str) -> str:
    """str(KVTransferError), as SGLang appends it after ' with exception '."""
    return f"KVTransferError(bootstrap_room={room}): {reason}"


def local_ip(env: Mapping[str, str] = os.environ) -> str:
    """get_local_ip_auto: SGLANG_HOST_IP / HOST_IP, else the route to 8.8.8.8, else the hostname."""
    ip = env.get("SGLANG_HOST_IP", "") or env.get("HOST_IP", "")
    if ip:
        return ip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("8.8.8.8", 80))
            return s.getsockname()[0]
    except OSError:
        pass
    try:
        ip = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)[0][4][0]
        if ip not in ("127.0.0.1", "0.0.0.0"):
            return ip
    except OSError:
        pass
    raise ValueError("Can not get local ip")


class Once:
    """logger.warning_once."""

    def __init__(self):
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, msg: str, log: Callable[[str], None]) -> None:
        with self._lock:
            if msg in self._seen:
                return
            self._seen.add(msg)
        log(msg)


def scheduler_traceback(frames: list[tuple[str, int, str, str]], exc: str) -> str:
    """A traceback through SGLang's scheduler process ending in ``exc`` (frames: file under srt/, line,
    function, source line)."""
    lines = ["Traceback (most recent call last):",
             f'  File "{SITE}/managers/scheduler.py", line 6412, in run_scheduler_process',
             "    scheduler.run_event_loop()"]
    for path, line, func, src in frames:
        lines += [f'  File "{SITE}/{path}", line {line}, in {func}', f"    {src}"]
    return "\n".join(lines + [exc])


def transfer_engine_failure(backend: str, missing_module: bool) -> tuple[Optional[str], str]:
    """(the logger.error line before it or None, the traceback) of a transfer engine that cannot start."""
    frames = [("distributed/bootstrap.py", 143, "init_parallel_runtime",
               "maybe_init_shared_mooncake_transfer_engine(gpu_id=get_device().gpu_id)"),
              ("distributed/device_communicators/mooncake_transfer_engine.py", 348,
               "maybe_init_shared_mooncake_transfer_engine", "init_mooncake_transfer_engine(")]
    if backend == "nixl":
        if missing_module:
            return None, scheduler_traceback(
                [("disaggregation/nixl/conn.py", 545, "__init__", "raise ImportError(")],
                "ImportError: Please install NIXL by following the instructions at "
                "https://github.com/ai-dynamo/nixl/blob/main/README.md to run SGLang with NixlTransferEngine.")
        return None, scheduler_traceback(
            [("disaggregation/nixl/conn.py", 556, "__init__", "self.agent.create_backend(backend, params)")],
            "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND")
    if missing_module:
        return None, scheduler_traceback(
            frames + [("distributed/device_communicators/mooncake_transfer_engine.py", 122, "__init__",
                       "raise ImportError(")],
            "ImportError: Please install mooncake by following the instructions at "
            "https://kvcache-ai.github.io/Mooncake/getting_started/build.html to run SGLang with "
            "MooncakeTransferEngine.")
    return "Mooncake Transfer Engine initialization failed.", scheduler_traceback(
        frames + [("distributed/device_communicators/mooncake_transfer_engine.py", 222, "initialize",
                   'raise RuntimeError("Mooncake Transfer Engine initialization failed.")')],
        "RuntimeError: Mooncake Transfer Engine initialization failed.")


def warmup(url: str, mode: str, dp_ranks: int, log: Callable[[str], None], headers: dict) -> bool:
    """_execute_server_warmup of a PD server: one fake-bootstrap /generate per DP rank."""
    log("Start of pd disaggregation warmup ...")
    codes = []
    for dp_rank in range(dp_ranks):
        body = {"sampling_params": {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True},
                "bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": dp_rank, "input_ids": [10, 11, 12, 13],
                "routed_dp_rank": dp_rank}
        req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(req, timeout=1800) as r:
                r.read()
                codes.append(r.status)
        except urllib.error.HTTPError as e:
            codes.append(e.code)
        except OSError as e:
            log(f"Initialization failed. warmup error: {e}")
            return False
    failed = [c for c in codes if c != 200]
    if failed:
        log(f"Disaggregation warmup failed (mode={mode}), status codes: {failed}")
    else:
        log(f"Disaggregation warmup requests completed for all {dp_ranks} DP ranks")
        log("End of disaggregation warmup")
    return True
