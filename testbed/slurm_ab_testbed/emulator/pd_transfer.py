"""The two TCP channels between a PD pair, standing in for SGLang's ZMQ side channel and the KV engine.

- side channel (prefill listens; its ``rank_ip:rank_port`` is what the ranks register with the
  bootstrap server): the decode sends one JSON line per message, as ``CommonKVReceiver`` pushes its
  destination metadata over ZMQ to the prefill rank: ``{"t": "meta", "room": R, "endpoint": "ip:port"}``
  once it has reserved KV for the request, ``{"t": "abort", "room": R}`` when it gives up.
- KV data (every decode node listens at the endpoint its leader announced): a prefill node connects,
  sends a JSON header line ``{"room": R, "bytes": N}``, then N bytes, and waits for ``ok``. The bytes
  really cross the nodes' link, so a slow or rate-limited link slows the transfer, as RDMA over a
  slow fabric does. Once every node pair's share arrived the prefill leader sends the decode leader
  the transfer's status, ``{"room": R, "bytes": 0, "final": 1, "status": "ok"|"failed", "first_ids":
  [...], "checksum": C}`` (SGLang's status message and metadata buffer: the first output token, the
  KV checksum).
- push command (a prefill node's side channel, from its leader): ``{"t": "push", "endpoint": E,
  "header": {...}, "bytes": N}``; the node pushes its share to E and answers ``ok`` or ``err TEXT``.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Callable, Optional

CHUNK = 256 * 1024
CONNECT_TIMEOUT = 5.0
IO_TIMEOUT = 60.0
_ZEROS = bytes(CHUNK)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


class LineServer:
    """A TCP listener whose connections start with one JSON line; ``handle(msg, conn, rfile)`` per connection."""

    def __init__(self, host: str, handle: Callable[[dict, socket.socket, object], None], name: str):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.handle = handle
        self.closed = threading.Event()
        threading.Thread(target=self._accept, name=name, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(IO_TIMEOUT)
        try:
            with conn, conn.makefile("rb") as rfile:
                line = rfile.readline()
                if line:
                    self.handle(json.loads(line), conn, rfile)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        self.closed.set()
        try:
            self.sock.close()
        except OSError:
            pass


def send_message(endpoint: str, msg: dict) -> Optional[str]:
    """One side-channel message; returns None or the connection error."""
    try:
        with socket.create_connection(_split(endpoint), timeout=CONNECT_TIMEOUT) as s:
            s.sendall((json.dumps(msg) + "\n").encode())
        return None
    except OSError as e:
        return str(e)


def push_kv(endpoint: str, header: dict, nbytes: int) -> tuple[Optional[str], float]:
    """Send a request's KV to the decode; returns (error or None, seconds from connect to the ack)."""
    t0 = time.perf_counter()
    try:
        with socket.create_connection(_split(endpoint), timeout=CONNECT_TIMEOUT) as s:
            s.settimeout(IO_TIMEOUT)
            s.sendall((json.dumps(dict(header, bytes=nbytes)) + "\n").encode())
            left = nbytes
            while left > 0:
                n = min(left, CHUNK)
                s.sendall(_ZEROS[:n])
                left -= n
            ack = s.makefile("rb").readline()
        if ack.strip() != b"ok":
            return "peer closed the KV connection before acknowledging", time.perf_counter() - t0
        return None, time.perf_counter() - t0
    except OSError as e:
        return str(e) or type(e).__name__, time.perf_counter() - t0


def receive_kv(header: dict, conn: socket.socket, rfile) -> bool:
    """Read the announced bytes of one transfer (after its header); True when all arrived."""
    left = int(header.get("bytes", 0))
    while left > 0:
        chunk = rfile.read(min(left, CHUNK))
        if not chunk:
            return False
        left -= len(chunk)
    return True


def ack(conn: socket.socket) -> None:
    try:
        conn.sendall(b"ok\n")
    except OSError:
        pass


def request_push(worker: str, endpoint: str, header: dict, nbytes: int) -> Optional[str]:
    """Tell another prefill node (its side channel) to push its share; its error or None."""
    try:
        with socket.create_connection(_split(worker), timeout=CONNECT_TIMEOUT) as s:
            s.settimeout(IO_TIMEOUT + CONNECT_TIMEOUT)
            s.sendall((json.dumps({"t": "push", "endpoint": endpoint, "header": header, "bytes": nbytes})
                       + "\n").encode())
            answer = s.makefile("rb").readline().decode(errors="replace").strip()
    except OSError as e:
        return str(e) or type(e).__name__
    if answer == "ok":
        return None
    return answer[4:] if answer.startswith("err ") else (answer or "the prefill node closed the connection")


def send_final(endpoint: str, header: dict) -> Optional[str]:
    """The transfer's status to the decode leader (no KV bytes); its error or None."""
    err, _ = push_kv(endpoint, dict(header, final=1), 0)
    return err
