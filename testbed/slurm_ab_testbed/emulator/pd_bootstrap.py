"""The PD bootstrap registry: the prefill leader's HTTP server, the ranks' registration, the decode's queries.

SGLang 0.5.23 ``disaggregation/common/conn.py``: ``CommonKVBootstrapServer`` (aiohttp, started by
the prefill leader's tokenizer manager on ``--host`` : ``--disaggregation-bootstrap-port``; routes
``/route`` PUT to register a rank and GET to query, ``/register_dp_rank``, ``/query_dp_ranks``,
``/health``; ready once dp x cp x tp x pp ranks registered), ``register_to_bootstrap`` (every prefill
rank PUTs its ``rank_ip:rank_port`` to ``<dist-init host or --host>:<bootstrap port>/route``, 5
attempts with backoff), and the decode's ``try_ensure_parallel_info`` / heartbeat GETs. The same
texts, status codes and log lines; no access log (aiohttp's is off below DEBUG).
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, urlsplit

REGISTER_ATTEMPTS = 5
ROUTE_ALL = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Python/3.12 aiohttp/3.12.15"
    sys_version = ""

    def log_message(self, fmt, *args) -> None:
        pass

    def _reply(self, code: int, body, content_type: str = "text/plain; charset=utf-8") -> None:
        data = json.dumps(body).encode() if not isinstance(body, (str, bytes)) else (
            body.encode() if isinstance(body, str) else body)
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8" if not isinstance(body, (str, bytes))
                         else content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def _route(self, method: str) -> None:
        reg: Registry = self.server.registry  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        try:
            if url.path == "/health" and method == "GET":
                return self._reply(200, "OK")
            if url.path == "/route":
                if method == "PUT":
                    return self._reply(*reg.register(self._json()))
                if method == "GET":
                    return self._reply(*reg.query({k: v[0] for k, v in parse_qs(url.query).items()}))
                return self._reply(405, "Method not allowed", "application/json")
            if url.path == "/register_dp_rank" and method == "POST":
                data = self._json()
                reg.rooms[int(data["bootstrap_room"])] = int(data["dp_rank"])
                return self._reply(200, "OK")
            if url.path == "/query_dp_ranks" and method == "POST":
                rooms = [int(r) for r in self._json().get("bootstrap_rooms", [])]
                return self._reply(200, {str(r): reg.rooms[r] for r in rooms if r in reg.rooms})
        except (ValueError, KeyError, TypeError) as e:
            return self._reply(500, f"500 Internal Server Error\n\nServer got itself in trouble: {e}")
        self._reply(404, "404: Not Found")

    def do_GET(self):
        self._route("GET")

    def do_PUT(self):
        self._route("PUT")

    def do_POST(self):
        self._route("POST")


class Registry:
    """The bootstrap server's table: prefill ranks by (dp, cp, tp, pp), and the prefill's layout."""

    def __init__(self):
        self.lock = threading.Lock()
        self.info: Optional[dict] = None
        self.table: dict[tuple[int, int, int, int], dict] = {}
        self.rooms: dict[int, int] = {}

    @property
    def expected(self) -> int:
        i = self.info
        return i["dp_size"] * i["attn_cp_size"] * i["attn_tp_size"] * i["pp_size"] if i else 0

    def ready(self) -> bool:
        return self.info is not None and len(self.table) >= self.expected

    def register(self, d: dict) -> tuple[int, str]:
        with self.lock:
            if self.table and self.info and self.info["decode_allocation_policy"] != d.get(
                    "decode_allocation_policy", "early"):
                return 400, "Inconsistent prefill allocation policies"
            if self.info is None:
                dp = d["attn_dp_size"] if d["system_dp_size"] == 1 else d["system_dp_size"]
                self.info = {"attn_tp_size": d["attn_tp_size"], "attn_cp_size": d["attn_cp_size"], "dp_size": dp,
                             "pp_size": d["pp_size"], "page_size": int(d["page_size"]),
                             "kv_cache_dtype": d["kv_cache_dtype"],
                             "follow_bootstrap_room": d.get("load_balance_method",
                                                            "follow_bootstrap_room") == "follow_bootstrap_room",
                             "enable_dsa_cache_layer_split": False, "enable_kv_cache_sharding": False,
                             "prefill_http_port": d.get("prefill_http_port"),
                             "decode_allocation_policy": d.get("decode_allocation_policy", "early")}
            group = d["attn_dp_rank"] if d["system_dp_size"] == 1 else d["system_dp_rank"]
            key = (group, d["attn_cp_rank"], d["attn_tp_rank"], d["pp_rank"])
            self.table[key] = {"rank_ip": d["rank_ip"], "rank_port": int(d["rank_port"])}
        return 200, "OK"

    def query(self, q: dict) -> tuple[int, object]:
        names = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        if not all(q.get(n) for n in names):
            return 400, "Missing inputs for bootstrap server."
        ranks = tuple(int(q[n]) for n in names)
        with self.lock:
            if not self.ready():
                return 503, f"Prefill server not fully registered yet ({len(self.table)} workers registered)."
            if ranks == (-1, -1, -1, -1):
                return 200, dict(self.info)
            if ranks not in self.table:
                dp, cp, tp, pp = ranks
                return 404, f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} pp_rank={pp}"
            return 200, dict(self.table[ranks])


class BootstrapServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int):
        self.registry = Registry()
        super().__init__((host, port), _Handler)
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="bootstrap", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port (the node's shutdown closes every PD server)."""
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()


def register_ranks(url: str, payloads: list[dict], log: Callable[[str], None], stop: threading.Event) -> bool:
    """register_to_bootstrap for each rank: 5 attempts with 1, 2, 4, 8 s backoff (x 0.75-1), then an error."""
    for payload in payloads:
        for attempt in range(REGISTER_ATTEMPTS):
            code, body = http("PUT", url, payload)
            if code == 200:
                break
            cause = f"status {code}" if code else body
            log(f"Prefill register attempt {attempt + 1}/{REGISTER_ATTEMPTS} failed: {cause}")
            if attempt == REGISTER_ATTEMPTS - 1 or stop.wait(min(2.0 ** attempt, 30.0) *
                                                             (0.75 + 0.25 * (time.monotonic() % 1))):
                log(f"Prefill instance failed to register to bootstrap server after {REGISTER_ATTEMPTS} retries")
                return False
    return True


def requests_error(url: str, exc: BaseException) -> str:
    """An OSError as python-requests words it (the text SGLang logs after "from bootstrap: ")."""
    u = urlsplit(url)
    path = u.path + ("?" + u.query if u.query else "")
    reason = getattr(exc, "reason", exc)
    obj = f"<urllib3.connection.HTTPConnection object at 0x{id(exc) & 0xffffffffffff:x}>"
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        cause = f"ConnectTimeoutError({obj}, 'Connection to {u.hostname} timed out. (connect timeout=5)')"
    elif getattr(reason, "errno", None) is not None and getattr(reason, "errno") < 0:
        cause = (f"NameResolutionError(\"{obj}: Failed to resolve '{u.hostname}' "
                 f"([Errno {reason.errno}] {reason.strerror})\")")
    else:
        detail = f"[Errno {reason.errno}] {reason.strerror}" if getattr(reason, "errno", None) else str(reason)
        cause = f"NewConnectionError('{obj}: Failed to establish a new connection: {detail}')"
    return (f"HTTPConnectionPool(host='{u.hostname}', port={u.port}): Max retries exceeded with url: {path} "
            f"(Caused by {cause})")


def http(method: str, url: str, body: Optional[dict] = None, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body text); status 0 and requests' error text when the connection failed."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ValueError) as e:
        return 0, requests_error(url, e)
