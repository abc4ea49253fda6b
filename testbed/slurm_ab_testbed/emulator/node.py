"""One emulated node of a replica: the startup sequence, its log lines, and how it dies or stops.

Node rank 0 plays SGLang's whole front end (HTTP server, tokenizer, scheduler); ranks >= 1 only
rendezvous, "load", serve the dummy health endpoints and print the statistics lines of the PP
stages whose TP0 they host. A fatal error is printed as SGLang does ("Scheduler hit an exception:
<traceback>", then "Received sigquit from a child process...") and the process then SIGKILLs
itself like SGLang's ``kill_process_tree`` (exit status 137 / -9). SIGTERM and SIGINT stop it
cleanly with status 0.

Every node publishes its GPUs' activity for the fake ``nvidia-smi`` (``gpu_activity.py``; in a
Slurm step or with ``SLURM_AB_EMU_GPU_STATE_DIR`` set): the memory plan once loaded, then the
engine's busy/idle transitions (node rank 0 sends them to the other nodes of the replica), and the
stop.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from typing import Optional

from .. import gpu_activity
from . import pd_node, profiler
from .build import Replica, build_core, plan_replica, with_kv_pool
from .cli_args import ServerArgs
from .costs import Costs
from .engine import Engine, Exchange
from .http_api import WARMUP_HEADER, App, DummyServer, Handler, Server, serve
from .knobs import Knobs
from .logfmt import LogSink, dummy_health_line
from .metrics import MetricsState, render
from .rendezvous import SILENT, Hub, Link, RendezvousError
from .scheduler import EngineFault
from .tokenizer import EmuTokenizer, TokenizerNotFound
from .topology import Rank, Topology
from .tracebacks import SIGQUIT, load_crash_traceback, oom_traceback, peer_lost_traceback, \
    scheduler_crash_traceback, watchdog_lines
from .memory import oom_message
from .nccl import host_name, init_error_traceback, nccl_init
from .noise import Noise, launch_seed
from .pd import warmup as pd_warmup

DEFAULT_DIST_TIMEOUT = 600
LOSS_GRACE = 0.3  # a peer vanishing during a job-wide SIGTERM is not a crash
SIGTERM_POLL_S = 5.0  # SGLang's sigterm_watchdog: asyncio.sleep(5) between checks


def read_model_config(model_path: str) -> dict:
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def server_args_repr(a: ServerArgs) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in a.to_json_dict().items())
    return f"server_args=ServerArgs({fields})"


class Node:
    def __init__(self, args: ServerArgs, warnings: tuple[str, ...], knobs: Knobs, costs: Costs):
        if knobs.faults.bind_loopback:
            args = dataclasses.replace(args, host="127.0.0.1")
        if knobs.faults.pd_role:
            args = dataclasses.replace(args, disaggregation_mode=knobs.faults.pd_role)
        self.args = args
        self.warnings = warnings
        self.knobs = knobs
        self.costs = costs
        self.sink = LogSink(knobs.log_ms)
        self.topo = Topology.from_args(args, knobs.gpus_per_node)
        self.rank = args.node_rank
        self.local = self.topo.ranks_on(self.rank)
        self.stats_prefixes = [self.topo.prefix(Rank(k, 0)) for k in self.topo.stats_stages(self.rank)]
        self.replica: Replica = plan_replica(args, costs, knobs.gpus_per_node, knobs.log_version)
        if knobs.faults.kv_pool_tokens is not None:
            self.replica = with_kv_pool(self.replica, knobs.faults.kv_pool_tokens)
        self.config = read_model_config(args.model_path)
        self.stop = threading.Event()
        self.dying = threading.Lock()
        self.hub: Optional[Hub] = None
        self.link: Optional[Link] = None
        self.app: Optional[App] = None
        self.http: Optional[Server] = None
        self.engine: Optional[Engine] = None
        self.joined = threading.Event()
        self.ready = threading.Event()
        self._serving = False
        self._draining = False
        self.pd = None           # the PD role of a prefill/decode leader (pd_prefill, pd_decode)
        self.pd_servers: list = []   # its bootstrap server / side channel / KV listener (pd_node)
        self.kv_endpoints: dict = {}  # a decode leader's: node rank -> that node's KV listener
        self.activity = gpu_activity.ActivityLog(gpu_activity.activity_path(), gpu_activity.publishing())

    # ---- logging helpers -----------------------------------------------------------------------
    def log_gpus(self, msg: str) -> None:
        for r in self.local:
            self.sink.log(msg, self.topo.prefix(r))

    def log_stats(self, body: str) -> None:
        for prefix in self.stats_prefixes:
            self.sink.log(body, prefix)

    def emit_stats(self, body: str) -> None:
        """Scheduler statistics line from rank 0's core: print here, forward to other stage hosts."""
        self.log_stats(body)
        if self.hub is not None and self.topo.pp > 1:
            self.hub.broadcast({"t": "log", "body": body})

    def sleep(self, seconds: float) -> bool:
        """Emulated duration; returns False when interrupted by a stop request."""
        return not self.stop.wait(seconds * self.knobs.time_scale)

    # ---- dying and stopping --------------------------------------------------------------------
    def die(self, traceback_text: str, ranks: Optional[str] = None) -> None:
        """Print SGLang's fatal sequence and SIGKILL ourselves (never returns)."""
        with self.dying:
            ranks = self.topo.prefix(self.local[0]) if ranks is None else ranks
            self.sink.log(f"Scheduler hit an exception: {traceback_text.rstrip()}", ranks)
            self.sink.log(SIGQUIT)
            self.activity.stop(time.time())
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(5)
            os._exit(137)

    def on_fault(self, fault: EngineFault) -> None:
        if fault.kind == "oom":
            model_type = self.config.get("model_type", "llama")
            text = oom_traceback(model_type, self.args.speculative_algorithm, oom_message(self.replica.memory))
        else:
            text = scheduler_crash_traceback()
        self.die(text, self.stats_prefixes[0] if self.stats_prefixes else None)

    def on_peer_lost(self, rank: int, reason: str) -> None:
        if self.stop.wait(LOSS_GRACE) or self._draining:   # the job's SIGTERM reached the peers too
            return
        host = (self.args.dist_init_addr or "").rsplit(":", 1)[0] or "?"
        who = f"node rank {rank}" + (f" ({host})" if rank == 0 else "")
        if reason.startswith(SILENT):
            self.watchdog_timeout()
        self.sink.log(f"Lost connection to {who}: {reason}", self.topo.prefix(self.local[0]))
        self.die(peer_lost_traceback(who))

    def watchdog_timeout(self) -> None:
        """A peer fell silent (link down): every local rank's NCCL watchdog reports the collective
        that never completed, after the process group's timeout, as torch prints it."""
        timeout_ms = int(self._dist_timeout() * 1000)
        ran_ms = timeout_ms + int((time.time() * 1000) % 97)
        with self.dying:
            for r in self.local:
                g = r.pp_rank * self.topo.tp + r.tp_rank
                for line in watchdog_lines(g, timeout_ms, ran_ms):
                    self.sink.write(line)

    def request_stop(self, signum=None, frame=None) -> None:
        if signum == signal.SIGTERM and self.rank == 0 and self.app is not None and self.app.status == "up":
            self._sigterm()
            return
        self.stop.set()

    def _sigterm(self) -> None:
        """SGLang's answer to SIGTERM once it serves (tokenizer_manager.py: SignalHandler's
        sigterm_handler, then sigterm_watchdog): a warning, then every 5 s (the emulator's clock)
        "Gracefully exiting... Remaining number of requests N" until none is left, then exit. A
        stuck scheduler never finishes or aborts its requests, so only SIGKILL ends it then."""
        if self._draining:
            return
        self._draining = True
        self.sink.log(f"SIGTERM received. signum={int(signal.SIGTERM)} frame=<frame at 0x7f{os.getpid():010x}, "
                      "file '/usr/lib/python3.12/selectors.py', line 468, code select>. "
                      "Draining requests and shutting down...")

        def drain() -> None:
            while not self.stop.wait(SIGTERM_POLL_S * self.knobs.time_scale):
                rids = self.engine.request_ids() if self.engine is not None else []
                self.sink.log(f"Gracefully exiting... Remaining number of requests {len(rids)}. "
                              f"Remaining requests remaining_rids={rids!r}.")
                if not rids:
                    self.stop.set()
        threading.Thread(target=drain, name="sigterm_watchdog", daemon=True).start()

    def fail_startup(self, message: str) -> int:
        self.sink.log(message)
        return 1

    # ---- entry ---------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        for w in self.warnings:
            self.sink.log(w)
        self.sink.log(server_args_repr(self.args))
        try:
            code = self._run_head() if self.rank == 0 else self._run_worker()
        finally:
            self._shutdown()
        return code

    def _shutdown(self) -> None:
        self.activity.stop(time.time())
        if self.app is not None:
            self.app.stopping = True
        if self.engine is not None:
            self.engine.stop()
        if self.http is not None:
            if self._serving:
                self.http.shutdown()
            self.http.server_close()
        for x in (self.hub, self.link, self.pd, *self.pd_servers):
            if x is not None:
                x.close()

    def _dist_addr(self) -> tuple[str, int]:
        host, _, port = (self.args.dist_init_addr or "127.0.0.1:0").rpartition(":")
        return host.strip("[]"), int(port)

    # ---- shared loading sequence ---------------------------------------------------------------
    def _load(self) -> bool:
        """Init distributed, load weights, memory pool, CUDA graphs (returns False if stopped)."""
        s, mem = self.costs.startup, self.replica.memory
        pd_node.check_transfer_engine(self)
        if not self.sleep(s.dist_init_s):
            return False
        self._nccl_init()
        self.log_gpus("Init torch distributed ends. mem usage=0.95 GB")
        self.log_gpus(f"Load weight begin. avail mem={mem.avail_before_load_gib:.2f} GB")
        if self.knobs.faults.crash_rank == self.rank:
            if not self.sleep(s.load_weights_s / 2):
                return False
            self.die(load_crash_traceback())
        if self.rank == 0 and self.knobs.faults.hang_startup:
            self.stop.wait()
            return False
        if not self.sleep(s.load_weights_s):
            return False
        arch = (self.config.get("architectures") or ["LlamaForCausalLM"])[0]
        self.log_gpus(f"Load weight end. type={arch}, dtype=torch.bfloat16, avail mem={mem.avail_after_load_gib:.2f} GB, "
                      f"mem usage={mem.weights_gib:.2f} GB.")
        a = self.args
        if a.speculative_algorithm == "DFLASH" and self.stats_prefixes:
            block = self.replica.config.num_draft_tokens
            for p in self.stats_prefixes:
                self.sink.log(f"Initialized DFLASH draft runner. attention_backend="
                              f"{a.speculative_draft_attention_backend or 'flashinfer'}, "
                              f"model={a.speculative_draft_model_path}, block_size={block}, "
                              f"draft_window_size=None, compact_cache=False", p)
                self.sink.log("DFLASH draft runner ready. mask_token=<|mask|>, mask_token_id=163838, "
                              "mask_token_id_override=None, noise_embed_scale=1.0", p)
        if not self.sleep(s.memory_pool_s):
            return False
        self.log_gpus(f"KV Cache is allocated. #tokens: {mem.max_total_num_tokens}, "
                      f"KV size: {mem.kv_pool_gib:.2f} GB")
        self.log_gpus(f"Memory pool end. avail mem={mem.avail_after_pool_gib:.2f} GB")
        if not a.disable_cuda_graph:
            self.log_gpus(f"Capture cuda graph begin. This can take up to several minutes. "
                          f"avail mem={mem.avail_after_pool_gib:.2f} GB")
            if not self.sleep(s.cuda_graph_s):
                return False
            self.log_gpus(f"Capture cuda graph end. Time elapsed: {s.cuda_graph_s * self.knobs.time_scale:.2f} s. "
                          f"mem usage={mem.cuda_graph_gib:.2f} GB. "
                          f"avail mem={mem.avail_after_pool_gib - mem.cuda_graph_gib:.2f} GB.")
        self._publish_memory()
        return True

    def _publish_memory(self) -> None:
        """The fake GPUs' memory.used: the share of each GPU this plan holds, of the fake's total."""
        mem = self.replica.memory
        share = (mem.total_gib - mem.avail_after_pool_gib + mem.cuda_graph_gib) / mem.total_gib
        try:
            total = gpu_activity.load_config()["gpu"]["memory_total_mib"]
        except (OSError, ValueError, KeyError):
            total = 0
        self.activity.start(time.time(), len(self.local), int(round(min(1.0, share) * total)))

    def _on_activity(self, busy: bool, t: float) -> None:
        """The engine went busy or idle: this node's file, and the replica's other nodes."""
        self.activity.mark(busy, t)
        if self.hub is not None:
            self.hub.broadcast({"t": "act", "b": busy, "at": t})

    def _nccl_init(self) -> None:
        """NCCL's init lines of every GPU rank of this node, to stdout as NCCL prints them
        (emulator/nccl.py: the network NCCL picks from the NCCL_* environment and the node's
        fabric); a communicator that cannot start kills the ranks, as torch's error does. One
        GPU in all has no communicator."""
        if self.topo.tp * self.topo.pp <= 1:
            return
        init = nccl_init()
        host = host_name()
        for i, _ in enumerate(self.local):
            for line in init.printed(os.environ, host, os.getpid() + 1 + i, i):
                self.sink.write(line, self.sink.out)
        if init.network is None:
            self.die(init_error_traceback(init.error or "unknown"))

    def _log_scheduler_ready(self) -> None:
        mem, rep = self.replica.memory, self.replica
        avail = mem.avail_after_pool_gib - mem.cuda_graph_gib
        for p in self.stats_prefixes:
            self.sink.log(f"max_total_num_tokens={mem.max_total_num_tokens}, "
                          f"chunked_prefill_size={rep.chunked_prefill_size}, "
                          f"max_prefill_tokens={self.args.max_prefill_tokens}, "
                          f"max_running_requests={rep.max_running_requests}, context_len={self.context_len}, "
                          f"available_gpu_mem={avail:.2f} GB", p)

    @property
    def context_len(self) -> int:
        return (self.args.context_length or self.config.get("max_position_embeddings")
                or self.costs.memory.context_length)

    def _dist_timeout(self) -> float:
        return float(self.args.dist_timeout or DEFAULT_DIST_TIMEOUT)

    # ---- rank 0 --------------------------------------------------------------------------------
    def _run_head(self) -> int:
        a, k = self.args, self.knobs
        try:
            tok = EmuTokenizer(a.tokenizer_path or a.model_path)
        except TokenizerNotFound as e:
            return self.fail_startup(f"OSError: {e}")
        self.pd_servers = [x for x in [pd_node.start_bootstrap(self)] if x is not None]
        if a.nnodes > 1:
            self.hub = Hub(self._dist_addr()[1], a.nnodes, self._on_head_message, self.on_peer_lost,
                           self._dist_timeout())
            try:
                self.hub.start()
            except RendezvousError as e:
                return self.fail_startup(f"torch.distributed.DistNetworkError: {e}")
        self.log_gpus("Init torch distributed begin.")
        if self.hub is not None and not self.hub.wait_joined(self._dist_timeout(), self.stop):
            if self.stop.is_set():
                return 0
            return self.fail_startup(
                f"torch.distributed.DistStoreError: Timed out after {self._dist_timeout():.0f} seconds waiting for "
                f"clients. {len(self.hub.peers) + 1}/{a.nnodes} clients joined.")
        if not self._load():
            return 0
        if self.hub is not None and not self.hub.wait_phase("loaded", self.stop):
            return 0
        self._log_scheduler_ready()
        seed = k.seed if k.seed is not None else (a.random_seed or 0)
        noise = Noise(self.costs.noise, launch_seed(seed, os.environ, a.port))
        core = build_core(self.replica, tok.output_ids, self.emit_stats, seed, k.faults.oom_first_prefill, noise,
                          pd_node.core_class(a.disaggregation_mode))
        exchange = Exchange(self.hub, k.collective_bytes) if self.hub is not None and k.collective_bytes else None
        self.engine = Engine(core, k.time_scale, self.on_fault, k.faults.die_after_requests, exchange,
                             k.faults.hang_after_requests)
        self.engine.on_activity = self._on_activity
        hub = self.hub
        self.engine.profiler = profiler.Profiler(self.log_gpus, profiler.rank_names(self.topo, self.local),
                                                 hub.broadcast if hub is not None else None)
        if pd_node.is_pd(a):
            self.pd = pd_node.start_role(self, core, self.engine)
        model_info = {"model_type": self.config.get("model_type"), "architectures": self.config.get("architectures")}
        self.app = App(a, k, tok, self.engine, self.sink, self.replica, model_info, self.context_len)
        self.app.stats_stages = self.topo.stats_stages(0)
        self.app.pd = self.pd
        try:
            self.http = Server((a.host, a.port), Handler, self.app)
        except OSError as e:
            self.sink.uvicorn(f"[Errno {e.errno}] error while attempting to bind on address "
                              f"({a.host!r}, {a.port}): {(e.strerror or str(e)).lower()}", "ERROR")
            return 1
        self._share_gauges(core)
        self.engine.start()
        serve(self.http)
        self._serving = True
        self.sink.uvicorn(f"Started server process [{os.getpid()}]")
        self.sink.uvicorn("Waiting for application startup.")
        self.sink.uvicorn("Application startup complete.")
        self.sink.uvicorn(f"Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        if self.hub is not None:
            self.hub.broadcast({"t": "ready"})
        if not a.skip_server_warmup and not self._warmup():
            return 0 if self.stop.is_set() else 1
        self.app.status = "up"
        self.sink.log("The server is fired up and ready to roll!")
        self.stop.wait()
        return 0

    def _share_gauges(self, core) -> None:
        """Node rank 0's metrics groups; every statistics report also goes to the nodes hosting
        other stats-logging schedulers (PP stages, DP ranks), which serve them on their /metrics."""
        self.app.metric_groups = self.topo.metric_groups(0)
        hub = self.hub
        if hub is not None and any(self.topo.metric_groups(n).stages for n in range(1, self.args.nnodes)):
            core.metrics.listener = lambda values: hub.broadcast({"t": "gauges", "v": values})

    def _on_head_message(self, rank: int, msg: dict) -> None:
        if msg.get("t") == "kv_endpoint":    # a decode node's KV listener (pd_node.start_kv_receiver)
            self.kv_endpoints[rank] = str(msg.get("endpoint"))
        # phases are tracked by the hub itself

    def _warmup(self) -> bool:
        """SGLang's _execute_server_warmup: GET /get_model_info, then an 8-token /generate."""
        url = self.args.url()
        err = ""
        for _ in range(120):
            if not self.sleep(1.0):
                return False
            try:
                with urllib.request.urlopen(url + "/get_model_info", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError as e:
                err = str(e)
        else:
            self.sink.log(f"Initialization failed. warmup error: {err}")
            return False
        if self.pd is not None:
            return pd_warmup(url, self.args.disaggregation_mode, self.args.dp_size, self.sink.log, {WARMUP_HEADER: "1"})
        body = json.dumps({"sampling_params": {"temperature": 0, "max_new_tokens": 8},
                           "text": "The capital city of France is"}).encode()
        req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json", WARMUP_HEADER: "1"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()
                return r.status == 200
        except OSError as e:
            if self.stop.is_set():
                return False
            self.sink.log(f"Initialization failed. warmup error: {e}")
            return False

    # ---- ranks >= 1 ----------------------------------------------------------------------------
    def _run_worker(self) -> int:
        a = self.args
        self.log_gpus("Init torch distributed begin.")
        self.link = Link(self.rank, a.nnodes, self._on_worker_message, self.on_peer_lost, self._dist_timeout())
        host, port = self._dist_addr()
        try:
            self.link.connect(host, port, self._dist_timeout(), self.stop)
        except RendezvousError as e:
            return 0 if self.stop.is_set() else self.fail_startup(str(e))
        deadline = time.time() + self._dist_timeout()
        while not self.joined.wait(0.2):
            if self.stop.is_set():
                return 0
            if time.time() > deadline:
                return self.fail_startup(f"torch.distributed.DistStoreError: Timed out after "
                                         f"{self._dist_timeout():.0f} seconds waiting for the other nodes.")
        if not self._load():
            return 0
        self._log_scheduler_ready()
        self.pd_servers = [x for x in [pd_node.register_worker(self), pd_node.start_kv_receiver(self)]
                           if x is not None]
        self.link.send({"t": "phase", "phase": "loaded"})
        while not self.ready.wait(0.2):
            if self.stop.is_set():
                return 0
        self._start_dummy()
        self.stop.wait()
        return 0

    def _on_worker_message(self, rank: int, msg: dict) -> None:
        kind = msg.get("t")
        if kind == "gauges":
            self._node_metrics().on_report(**msg.get("v", {}))
            return
        if kind == "act":
            self.activity.mark(bool(msg.get("b")), float(msg.get("at", time.time())))
            return
        if kind == "profile":
            profiler.on_message(self.log_gpus, profiler.rank_names(self.topo, self.local), msg)
            return
        if kind == "joined":
            self.joined.set()
        elif kind == "ready":
            self.ready.set()
        elif kind == "ar":
            self.link.echo(msg)
        elif kind == "log":
            self.log_stats(str(msg.get("body", "")))
        elif kind == "reject":
            self.sink.log(f"Rendezvous rejected by node rank 0: {msg.get('reason')}")
            self.die(peer_lost_traceback("node rank 0"))

    def _node_metrics(self) -> MetricsState:
        """The gauges of this node's stats-logging schedulers (rank >= 1; fed by node rank 0)."""
        if getattr(self, "_metrics", None) is None:
            self._metrics = MetricsState(engine_type=self.args.disaggregation_mode if pd_node.is_pd(self.args)
                                         else "unified")
        return self._metrics

    def _metrics_text(self) -> str:
        g = self.topo.metric_groups(self.rank)
        state = self._node_metrics()
        return render(state, self.args.served_model_name or self.args.model_path, list(g.stages),
                      tokenizer=False, **g.kwargs())

    def _start_dummy(self) -> None:
        a = self.args
        try:
            self.http = DummyServer((a.host, a.port), self._metrics_text if a.enable_metrics else None)
        except OSError as e:
            self.sink.log(f"WARNING: dummy health check server not started at {a.host}:{a.port}: {e} "
                          "(port taken, e.g. by another emulated node on this host); continuing without it")
            return
        serve(self.http)
        self._serving = True
        self.sink.log(dummy_health_line(self.knobs.log_version, a.host, a.port))
