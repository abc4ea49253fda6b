"""The HTTP surface of node rank 0 (SGLang's FastAPI app) and the dummy health server of ranks >= 1.

Stdlib only (``ThreadingHTTPServer``, HTTP/1.1 keep-alive, chunked streaming). What clients see
follows SGLang's ``http_server.py``: ``/generate`` streams ``data: {json}\\n\\n`` chunks with the
cumulative ``text``, the new ``output_ids`` and ``meta_info``, then ``data: [DONE]\\n\\n``;
``/health`` is 503 until the warm-up finished and otherwise runs a 1-token generation when idle
(which shows up as a ``Prefill batch ... #new-token: 1`` line, as in SGLang); access lines are
uvicorn's. Endpoints that SGLang added later (``/server_info``, ``/model_info``, ``/ready``)
answer 404 when an older ``SLURM_AB_EMU_LOG_VERSION`` is emulated.

Outputs (0.5.23 ``managers/tokenizer_manager.py`` _handle_batch_output / _wait_one_response):
a streamed ``/generate`` chunk carries the cumulative ``text`` and the cumulative ``output_ids``
(0.5.6 too; 0.4.10 and 0.5.2 sent only the new ids), ``meta_info`` has ``num_retractions``,
``reasoning_tokens``, ``cached_tokens`` (prefix-cache hits, ``radix.py``) and
``cached_tokens_details`` (``{"device": N, "host": 0}``, None without hits; 0.5.23 only). At
temperature 0 (or top_k 1) the tokens are the prompt's deterministic ones (``outputs.py``); the
OpenAI endpoints return the same tokens as text, ``usage.prompt_tokens_details`` is
``{"cached_tokens": N}`` when there were hits, and with ``return_cached_tokens_details`` (what
bench_serving's ``--cache-report`` sends) the response's ``sglext.cached_tokens_details``.
``/flush_cache`` empties the prefix cache when the server is idle and answers 400 otherwise
(``http_server.flush_cache``, ``scheduler.flush_cache``). ``/start_profile`` and ``/stop_profile``
(GET or POST, ``ProfileReq`` fields as JSON): profiler.py.
"""
from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, urlsplit

from .engine import Engine, RequestStream
from .metrics import HttpMetrics, render
from .outputs import Outputs
from .profiler import ProfileError
from .scheduler import Req
from .tokenizer import StreamText

HEALTH_CHECK_TIMEOUT = 20.0
WARMUP_HEADER = "X-Slurm-Ab-Emulator-Warmup"
VERSIONS = {"0.5.23": "0.5.23", "0.5.6": "0.5.6.post2", "0.4.10": "0.4.10.post2"}


def greedy(temperature, top_k=None) -> bool:
    """SGLang's greedy sampling (sampling_params.py: temperature below 1e-6 becomes top_k = 1);
    a missing temperature is SGLang's default 1.0 (sampled)."""
    try:
        return (temperature is not None and 0 <= float(temperature) < 1e-6) or (top_k is not None and int(top_k) == 1)
    except (TypeError, ValueError):
        return False


class HTTPError(Exception):
    def __init__(self, code: int, body: dict):
        super().__init__(code)
        self.code = code
        self.body = body


def _abort_error(abort: dict) -> HTTPError:
    """A non-streamed request that ended in FINISH_ABORT (tokenizer_manager._handle_abort_finish_reason):
    400 is a ValueError ({"error": {"message"}}), other codes an HTTPException ({"detail"})."""
    if abort["status_code"] == 400:
        return HTTPError(400, {"error": {"message": abort["message"]}})
    return HTTPError(abort["status_code"], {"detail": abort["message"]})


def _bad_request(message: str, code: int = 400) -> HTTPError:
    return HTTPError(code, {"object": "error", "message": message, "type": "BadRequestError", "param": None,
                            "code": code})


class App:
    """State shared by the handlers of rank 0."""

    def __init__(self, args, knobs, tokenizer, engine: Engine, sink, replica, model_info: dict,
                 context_len: int):
        self.args = args
        self.knobs = knobs
        self.tok = tokenizer
        self.engine = engine
        self.sink = sink
        self.replica = replica
        self.model_info = model_info
        self.context_len = context_len
        self.version = VERSIONS[knobs.log_version]
        self.new_api = knobs.log_version == "0.5.23"
        self.status = "starting"     # -> "up"
        self.startup_time = time.time()
        self.stopping = False
        self.spec = args.speculative_algorithm
        self.stats_stages: list[int] = []      # PP stages reporting on this node (node sets it)
        self.metric_groups = None              # topology.MetricGroups of node rank 0 (node sets it)
        self.http_metrics = HttpMetrics() if args.enable_metrics else None
        self.pd = None                         # PD role (pd_prefill / pd_decode): bootstrap and KV first
        faults = knobs.faults
        # correctness faults (outputs.py): a broken draft model only matters with a speculative algorithm
        self.diverge_at = faults.divergence if self.spec else None
        self.empty_eos = tokenizer.eos_id if faults.empty_output else None

    def submit(self, req: Req, body: dict) -> None:
        """Hand a request to the engine; a PD role first bootstraps it with its peer (pd.py)."""
        if self.pd is None:
            self.engine.submit(req)
        else:
            from .pd import Bootstrap, routed_dp_rank
            self.pd.submit(req, Bootstrap.from_body(body, self.args.disaggregation_bootstrap_port),
                           routed_dp_rank(body, self.args))

    # ---- info bodies ---------------------------------------------------------------------------
    def get_model_info(self) -> dict:
        a = self.args
        info = {"model_path": a.model_path, "tokenizer_path": a.tokenizer_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default"}
        if self.new_api:
            info.update({"served_model_name": a.served_model_name, "load_format": "auto",
                         "reasoning_parser": a.reasoning_parser, "tool_call_parser": a.tool_call_parser,
                         "disaggregation_mode": a.disaggregation_mode, "has_image_understanding": False,
                         "has_audio_understanding": False, **self.model_info})
        return info

    def get_server_info(self) -> dict:
        def state(core):
            c = core.counters
            st = {"last_gen_throughput": c.last_gen_throughput,
                  "memory_usage": {"weight": round(self.replica.memory.weights_gib, 2),
                                   "kvcache": round(self.replica.memory.kv_pool_gib, 2),
                                   "token_capacity": self.replica.memory.max_total_num_tokens,
                                   "graph": round(self.replica.memory.cuda_graph_gib, 2)},
                  "effective_max_running_requests_per_dp": self.replica.max_running_requests,
                  "world_size": self.args.world_size}
            if self.spec:
                st["avg_spec_accept_length"] = core.avg_spec_accept_length
            return st
        body = dict(self.args.to_json_dict())
        body.update({"max_total_num_tokens": self.replica.memory.max_total_num_tokens,
                     "max_req_input_len": self.context_len - 1,
                     "chunked_prefill_size": self.replica.chunked_prefill_size,
                     "max_running_requests": self.replica.max_running_requests,
                     "mem_fraction_static": self.replica.memory.mem_fraction_static,
                     "internal_states": [self.engine.snapshot(state)], "version": self.version})
        if self.new_api:
            body.update({"startup_time": self.startup_time, "frontend": "python"})
        return body

    def metrics_text(self) -> str:
        """SGLang 0.5.23's /metrics (metrics.render), read under the scheduler lock. The gauges of
        the PP stages whose TP0 scheduler runs on node rank 0 are served here, as SGLang serves
        each node's own schedulers' metrics."""
        name = self.args.served_model_name or self.args.model_path
        g = self.metric_groups
        stages = list(g.stages) if g is not None else (self.stats_stages or [0])
        kw = g.kwargs() if g is not None else {}
        return self.engine.snapshot(lambda core: render(core.metrics, name, stages, http=self.http_metrics, **kw))

    # ---- request building ----------------------------------------------------------------------
    def new_req(self, ids: list[int], max_new: int, rid: Optional[str] = None, kind: str = "user",
                streaming: bool = False, greedy: bool = False):
        """greedy: temperature 0 (or top_k 1): the prompt's deterministic tokens (outputs.py)."""
        if len(ids) >= self.context_len:
            raise ValueError(f"The input ({len(ids)} tokens) is longer than the model's context length "
                             f"({self.context_len} tokens).")
        if len(ids) + max_new > self.context_len:
            raise ValueError(f"Requested token count exceeds the model's maximum context length of "
                             f"{self.context_len} tokens. You requested a total of {len(ids) + max_new} tokens: "
                             f"{len(ids)} tokens from the input messages and {max_new} tokens for the completion.")
        stream = RequestStream()
        req = Req(rid or uuid.uuid4().hex, len(ids), max_new, kind=kind, listener=stream, streaming=streaming,
                  input_ids=list(ids))
        if greedy or self.empty_eos is not None:
            req.outputs = Outputs.for_prompt(ids, self.tok.plain_ids, self.diverge_at, self.empty_eos)
        return req, stream

    def meta(self, req: Req, created: float, now: float, completion: int, finished: bool) -> dict:
        reason = (req.finish_reason or {"type": "length", "length": completion}) if finished else None
        m = {"id": req.rid, "finish_reason": reason, "prompt_tokens": req.input_len, "weight_version": "default"}
        if self.new_api:
            m.update({"num_retractions": 0, "reasoning_tokens": 0})
        m.update({"completion_tokens": completion, "cached_tokens": req.cached_tokens})
        if self.new_api:
            m["cached_tokens_details"] = {"device": req.cached_tokens, "host": 0} if req.cached_tokens else None
        if finished:
            if self.spec:
                m["spec_verify_ct"] = req.verify_ct
                if self.new_api and req.verify_ct:
                    n = self.replica.config.num_draft_tokens
                    m["spec_accept_length"] = completion / req.verify_ct
                    m["spec_accept_rate"] = ((req.accepted - req.verify_ct) / (req.verify_ct * (n - 1))
                                             if n > 1 else 0.0)
                    m["spec_num_correct_drafts"] = req.accepted - req.verify_ct
                    m["spec_num_proposed_drafts"] = req.verify_ct * (n - 1)
            m["e2e_latency"] = now - created
        return m

    def events(self, req: Req, stream: RequestStream):
        """Yield TokenEvents until the request finishes (bounded: stops when the server stops)."""
        while not self.stopping:
            try:
                ev = stream.q.get(timeout=0.5)
            except queue.Empty:
                if self.engine.dead:
                    return
                continue
            yield ev
            if ev.finished:
                return


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def app(self) -> App:
        return self.server.app  # type: ignore[attr-defined]

    # ---- plumbing ------------------------------------------------------------------------------
    def log_request(self, code="-", size="-") -> None:
        host, port = self.client_address[:2]
        self.app.sink.access(f"{host}:{port}", self.requestline, int(code) if str(code).isdigit() else 0)

    def log_message(self, fmt, *args) -> None:  # silence http.server's own stderr lines
        pass

    def parse_request(self) -> bool:
        # The router probes for gRPC with an HTTP/2 preface; uvicorn (h11) rejects it like this.
        if self.raw_requestline.startswith(b"PRI * HTTP/2"):
            self.app.sink.uvicorn("Invalid HTTP request received.", "WARNING")
            self.close_connection = True
            return False
        return super().parse_request()

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise _bad_request(f"JSON decode error: {e}") from None
        if not isinstance(data, dict):
            raise _bad_request("request body must be a JSON object")
        return data

    def _send(self, code: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _sse(self, obj) -> None:
        self._chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

    def send_response(self, code, message=None) -> None:
        self._status = code
        super().send_response(code, message)

    def _dispatch(self, method: str) -> None:
        """Route a request, counted as SGLang's HTTP middleware counts it (http_request_metrics.py:
        the route's path template, else the raw path; active until the body is sent)."""
        path = urlsplit(self.path).path
        m = self.app.http_metrics
        endpoint = "/v1/models/{model}" if path.startswith("/v1/models/") else path
        if m is None:
            return self._route(method, path)
        m.begin(endpoint, method)
        self._status = 500
        try:
            self._route(method, path)
        finally:
            m.end(endpoint, method, self._status)

    def _route(self, method: str, path: str) -> None:
        route = ROUTES.get(path)
        if route is None and path.startswith("/v1/models/"):
            route = ROUTES["/v1/models/{model}"]
        if route is None or (not self.app.new_api and path in NEW_API_ONLY):
            return self._send(404, {"detail": "Not Found"})
        methods, fn = route
        if method not in methods:
            return self._send(405, {"detail": "Method Not Allowed"})
        if self.app.args.api_key and path not in PUBLIC and \
                self.headers.get("Authorization", "") != f"Bearer {self.app.args.api_key}":
            return self._send(401, {"error": "Unauthorized"})
        try:
            fn(self)
        except HTTPError as e:
            self._send(e.code, e.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    # ---- native endpoints ----------------------------------------------------------------------
    def health(self) -> None:
        app = self.app
        if app.status != "up" or app.stopping:
            return self._send(503, b"", "text/plain")
        ok = app.engine.health_probe(lambda: Req(f"HEALTH_CHECK_{time.time()}", 1, 1, kind="health"),
                                     HEALTH_CHECK_TIMEOUT)
        if not ok:
            app.sink.log(f"Health check failed. Server couldn't get a response from detokenizer for last "
                         f"{int(HEALTH_CHECK_TIMEOUT)} seconds.")
        self._send(200 if ok else 503, b"", "text/plain")

    def ready(self) -> None:
        self._send(200 if self.app.status == "up" else 503, {"status": self.app.status})

    def model_info(self) -> None:
        if self.app.new_api and urlsplit(self.path).path == "/get_model_info":
            self.app.sink.log("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                              "Please use '/model_info' instead.")
        self._send(200, self.app.get_model_info())

    def server_info(self) -> None:
        if self.app.new_api and urlsplit(self.path).path == "/get_server_info":
            self.app.sink.log("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                              "version. Please use '/server_info' instead.")
        self._send(200, self.app.get_server_info())

    def get_load(self) -> None:
        def load(core):
            return [{"dp_rank": 0, "num_reqs": len(core.running) + len(core.waiting),
                     "num_waiting_reqs": len(core.waiting), "num_tokens": core.used_tokens}]
        self._send(200, self.app.engine.snapshot(load))

    def flush_cache(self) -> None:
        """SGLang's /flush_cache?timeout=S: flushed when the scheduler is idle (waiting up to S s
        for it), else 400 and the scheduler's warning."""
        app = self.app
        try:
            timeout = float((parse_qs(urlsplit(self.path).query).get("timeout") or ["0"])[0])
        except ValueError:
            timeout = 0.0
        deadline = time.time() + max(0.0, timeout)
        while True:
            ok, queued, running = app.engine.snapshot(
                lambda core: (core.flush_cache(), len(core.waiting), len(core.running)))
            if ok or time.time() >= deadline:
                break
            time.sleep(0.05)
        prefix = " TP0" if app.args.tp_size > 1 else ""
        if not ok:
            app.sink.log(f"Cache not flushed because there are pending requests. #queue-req: {queued}, "
                         f"#running-req: {running}", prefix)
            return self._send(400, "Flush cache failed.\n", "text/plain")
        app.sink.log("Cache flushed successfully!", prefix)
        self._send(200, "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                        "waiting requests, the operation will not be performed.)\n", "text/plain")

    def start_profile(self) -> None:
        self._profile(lambda p: p.start(self._body()), "Start profiling.\n")

    def stop_profile(self) -> None:
        self._profile(lambda p: p.stop(), "Stop profiling. This will take some time.\n")

    def _profile(self, fn, done: str) -> None:
        """http_server.start_profile_async / stop_profile_async: the scheduler's refusal is a
        RuntimeError in the tokenizer manager, which FastAPI answers 500 (uvicorn logs it)."""
        prof = self.app.engine.profiler
        try:
            if prof is None:
                raise ProfileError("Profiling is not available on this server.")
            fn(prof)
        except ProfileError as e:
            self.app.sink.uvicorn("Exception in ASGI application", "ERROR")
            self.app.sink.write("Traceback (most recent call last):\n"
                                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/'
                                'tokenizer_control_mixin.py", line 432, in _execute_profile\n'
                                "    raise RuntimeError(result.message)\n"
                                f"RuntimeError: {e}")
            return self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
        self._send(200, done, "text/plain; charset=utf-8")

    def metrics(self) -> None:
        if not self.app.args.enable_metrics:
            return self._send(404, {"detail": "Not Found"})
        self._send(200, self.app.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")

    def models(self) -> None:
        name, ctx = self.app.args.served_model_name, self.app.context_len
        card = {"id": name, "object": "model", "created": int(self.app.startup_time), "owned_by": "sglang",
                "root": name, "max_model_len": ctx}
        path = urlsplit(self.path).path
        if path.startswith("/v1/models/"):
            if path[len("/v1/models/"):] != name:
                return self._send(404, {"error": {"message": f"The model '{path[11:]}' does not exist",
                                                  "type": "invalid_request_error", "param": "model",
                                                  "code": "model_not_found"}})
            return self._send(200, card)
        self._send(200, {"object": "list", "data": [card]})

    def _prompt_ids(self, text=None, ids=None) -> list[int]:
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise _bad_request("input_ids must be a list of integers")
            return ids
        if not isinstance(text, str):
            raise _bad_request("Either text or input_ids should be provided.")
        return self.app.tok.encode(text)

    def generate(self) -> None:
        app = self.app
        body = self._body()
        text, ids = body.get("text"), body.get("input_ids")
        sampling = body.get("sampling_params") or {}
        max_new = int(sampling.get("max_new_tokens", 128) if sampling.get("max_new_tokens") is not None else 128)
        det = greedy(sampling.get("temperature"), sampling.get("top_k"))
        stream = bool(body.get("stream", False))
        batch = isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list))
        if batch:
            if stream:
                raise _bad_request("the emulator does not stream batched /generate requests")
            prompts = text if isinstance(text, list) else ids
            try:
                results = [self._run_one(p if isinstance(p, str) else None, p if isinstance(p, list) else None,
                                         max_new, None, greedy_=det) for p in prompts]
            except ValueError as e:
                raise HTTPError(400, {"error": {"message": str(e)}}) from None
            return self._send(200, results)
        prompt_ids = self._prompt_ids(text, ids)
        if not stream:
            try:
                return self._send(200, self._run_one(None, prompt_ids, max_new, body.get("rid"), self._kind(), body,
                                                     greedy_=det))
            except ValueError as e:
                app.sink.log(f"[http_server] Error: {e}")
                raise HTTPError(400, {"error": {"message": str(e)}}) from None
        created = time.time()
        try:
            req, rs = app.new_req(prompt_ids, max_new, body.get("rid"), streaming=True, greedy=det)
        except ValueError as e:
            self._start_stream()
            app.sink.log(f"[http_server] Error: {e}")
            self._sse({"error": {"message": str(e)}})
            self._sse(b"[DONE]")
            return self._end_stream()
        self._start_stream()
        app.submit(req, body)
        out = StreamText(app.tok)
        cumulative = app.knobs.log_version != "0.4.10"      # 0.5.6+: the whole output so far
        ids_json = ""                  # the cumulative ids, kept as JSON text: O(tokens) per request
        try:
            for ev in app.events(req, rs):
                out.add(ev.new_ids)
                meta = app.meta(req, created, ev.now, len(out.ids), ev.finished)
                if ev.abort:                   # SGLang streams the aborted output, finish_reason "abort"
                    meta["finish_reason"] = ev.abort
                new = ", ".join(map(str, ev.new_ids))
                ids_json = (ids_json + ", " + new if ids_json and new else ids_json or new) if cumulative else new
                self._sse(b'{"text": ' + json.dumps(out.text).encode() + b', "output_ids": [' + ids_json.encode()
                          + b'], "meta_info": ' + json.dumps(meta).encode() + b"}")
            self._sse(b"[DONE]")
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            app.engine.abort(req.rid)
            self.close_connection = True

    def _kind(self) -> str:
        """The node's own SGLang-style warm-up does not count as a user request (faults, counters)."""
        return "warmup" if self.headers.get(WARMUP_HEADER) else "user"

    def _run_one(self, text, ids, max_new: int, rid, kind: str = "user", body: Optional[dict] = None,
                 greedy_: bool = False) -> dict:
        app = self.app
        created = time.time()
        req, rs = app.new_req(self._prompt_ids(text, ids), max_new, rid, kind, greedy=greedy_)
        app.submit(req, body or {})
        out_ids: list[int] = []
        last = None
        for ev in app.events(req, rs):
            out_ids.extend(ev.new_ids)
            last = ev
        if last is not None and last.abort:
            raise _abort_error(last.abort)
        if last is None or not last.finished:
            raise HTTPError(500, {"error": {"message": "Internal Server Error"}})
        return {"text": app.tok.decode(out_ids), "output_ids": out_ids,
                "meta_info": app.meta(req, created, last.now, len(out_ids), True)}

    # ---- OpenAI-compatible endpoints -----------------------------------------------------------
    def completions(self) -> None:
        body = self._body()
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        ids = self._prompt_ids(prompt if isinstance(prompt, str) else None,
                               prompt if isinstance(prompt, list) else None)
        self._openai(body, ids, chat=False)

    def chat_completions(self) -> None:
        body = self._body()
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _bad_request("messages must be a non-empty list")
        parts = []
        for m in msgs:
            content = m.get("content", "")
            if isinstance(content, list):
                content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
            parts.append(f"{m.get('role', 'user')}: {content} </s> ")
        ids = self.app.tok.encode("".join(parts) + "assistant: ")
        self._openai(body, ids, chat=True)

    def _openai(self, body: dict, ids: list[int], chat: bool) -> None:
        app = self.app
        max_new = body.get("max_completion_tokens") or body.get("max_tokens") or (
            app.context_len - len(ids) if chat else 16)
        model = body.get("model") or app.args.served_model_name
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        try:
            req, rs = app.new_req(ids, int(max_new), streaming=bool(body.get("stream", False)),
                                  greedy=greedy(body.get("temperature"), body.get("top_k")))
        except ValueError as e:
            raise _bad_request(str(e)) from None
        app.submit(req, body)
        details = bool(body.get("return_cached_tokens_details"))

        def sglext() -> Optional[dict]:
            """serving_completions/serving_chat: the request's cached_tokens_details at response level."""
            if not details or not req.cached_tokens:
                return None
            return {"routed_experts": None, "cached_tokens_details": {"device": req.cached_tokens, "host": 0},
                    "spec_tokens_details": None, "input_ids": None}

        def choice(text: str, finish: Optional[str]) -> dict:
            if chat:
                return {"index": 0, "delta" if stream else "message":
                        ({"role": "assistant", "content": text} if not stream or text else {"content": text}),
                        "logprobs": None, "finish_reason": finish, "matched_stop": None}
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}

        stream = bool(body.get("stream", False))
        usage = lambda n: {"prompt_tokens": len(ids), "total_tokens": len(ids) + n, "completion_tokens": n,  # noqa: E731
                           "prompt_tokens_details": {"cached_tokens": req.cached_tokens}
                           if app.args.enable_cache_report else None}
        if not stream:
            out_ids: list[int] = []
            for ev in app.events(req, rs):
                out_ids.extend(ev.new_ids)
                if ev.abort:
                    raise _abort_error(ev.abort)
            finish = "stop" if req.finish_reason else "length"
            resp = {"id": req.rid, "object": kind, "created": created, "model": model,
                    "choices": [choice(app.tok.decode(out_ids), finish)], "usage": usage(len(out_ids))}
            if (ext := sglext()) is not None:
                resp["sglext"] = ext
            return self._send(200, resp)
        self._start_stream()
        out = StreamText(app.tok)
        try:
            for ev in app.events(req, rs):
                if ev.abort:                   # serving_completions: a streaming error chunk, then [DONE]
                    code = ev.abort["status_code"]
                    self._sse({"error": {"object": "error", "message": ev.abort["message"],
                                         "type": HTTPStatus(code).name, "param": None, "code": code}})
                    break
                delta = out.add(ev.new_ids)
                finish = ("stop" if req.finish_reason else "length") if ev.finished else None
                self._sse({"id": req.rid, "object": kind + ".chunk" if chat else kind, "created": created,
                           "model": model, "choices": [choice(delta, finish)], "usage": None})
            if (ext := sglext()) is not None:
                self._sse({"id": req.rid, "object": kind + ".chunk" if chat else kind, "created": created,
                           "model": model, "choices": [], "usage": None, "sglext": ext})
            if (body.get("stream_options") or {}).get("include_usage"):
                self._sse({"id": req.rid, "object": kind + ".chunk" if chat else kind, "created": created,
                           "model": model, "choices": [], "usage": usage(len(out.ids))})
            self._sse(b"[DONE]")
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            app.engine.abort(req.rid)
            self.close_connection = True


GET, POST, BOTH = ("GET",), ("POST",), ("GET", "POST")
ROUTES: dict[str, tuple[tuple[str, ...], Callable]] = {
    "/health": (GET, Handler.health), "/health_generate": (GET, Handler.health),
    "/ready": (GET, Handler.ready),
    "/get_model_info": (GET, Handler.model_info), "/model_info": (GET, Handler.model_info),
    "/get_server_info": (GET, Handler.server_info), "/server_info": (GET, Handler.server_info),
    "/get_load": (GET, Handler.get_load),
    "/flush_cache": (BOTH, Handler.flush_cache),
    "/start_profile": (BOTH, Handler.start_profile), "/stop_profile": (BOTH, Handler.stop_profile),
    "/metrics": (GET, Handler.metrics),
    "/v1/models": (GET, Handler.models), "/v1/models/{model}": (GET, Handler.models),
    "/generate": (("POST", "PUT"), Handler.generate),
    "/v1/completions": (POST, Handler.completions),
    "/v1/chat/completions": (POST, Handler.chat_completions),
}
NEW_API_ONLY = {"/server_info", "/model_info", "/ready"}
PUBLIC = {"/health", "/health_generate", "/ready", "/metrics"}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr, handler, app=None):
        self.app = app
        super().__init__(addr, handler)


def serve(server: Server) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True)
    t.start()
    return t


class DummyHandler(BaseHTTPRequestHandler):
    """Ranks >= 1: /health, /health_generate and /ping always 200 (SGLang's dummy server); with
    --enable-metrics, /metrics serves this node's own schedulers' series (launch_dummy_health_
    check_server adds the same prometheus route as node rank 0's app, over this node's processes)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args) -> None:
        pass

    def do_GET(self):
        path = urlsplit(self.path).path
        ctype = "application/json"
        if path in ("/health", "/health_generate", "/ping"):
            body, code = b"", 200
        elif path == "/metrics" and self.server.metrics is not None:
            body, code = self.server.metrics().encode(), 200
            ctype = "text/plain; version=0.0.4; charset=utf-8"
        else:
            body, code = b'{"detail":"Not Found"}', 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class DummyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, metrics: Optional[Callable[[], str]] = None):
        self.metrics = metrics          # None: no --enable-metrics (404)
        super().__init__(addr, DummyHandler)
