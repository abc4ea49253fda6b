"""Multi-node rendezvous of one emulated replica over TCP at ``--dist-init-addr``.

Node rank 0 listens on the dist-init port (as torch's TCPStore does) and the other ranks connect,
retrying until rank 0 is up or the dist timeout passes. Afterwards the connection carries JSON
lines: phase messages (``joined``, ``loaded``, ``ready``), scheduler log lines for the nodes that
host other PP stages' TP0 (``log``), heartbeats every 0.5 s, and one exchange per forward while
serving (``ar``: rank 0 sends a padded message to every peer, each echoes it; the forward is done
when every echo is back). The exchange stands in for the forward's NCCL collectives: it is sent
from a thread of its own and overlaps the forward's modelled duration, so on a healthy bridge it
adds little (measured, 4 nodes, time scale 0.02: 4 x 1000 tokens in 1.32 s vs 1.21 s without;
nothing at scale 1), and a slow link of any node (``tc ... tbf``) stretches every forward of
the replica, as a slow NIC does to NCCL.

A peer whose connection breaks (its process died: FIN or RST) is reported at once, like NCCL's
"remote process exited". A peer that falls silent (its link is down: no FIN, no RST) is waited for
as NCCL's watchdog waits for a collective: until the silence timeout (the replica's dist timeout),
then reported with a reason starting with ``SILENT`` (the node prints the watchdog's timeout).
"""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Callable, Optional

HEARTBEAT_INTERVAL = 0.5
HEARTBEAT_TIMEOUT = 2.0   # default silence timeout (tests of the transport alone)
CONNECT_RETRY = 0.5
SILENT = "collective timed out"

OnMessage = Callable[[int, dict], None]
OnLost = Callable[[int, str], None]


def encode(msg: dict) -> bytes:
    """One message as its JSON line."""
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


class RendezvousError(RuntimeError):
    """Listening, connecting or joining failed (the message mimics torch.distributed's)."""


class Conn:
    """One peer connection: a reader thread (with heartbeat timeout) and a heartbeat sender."""

    def __init__(self, sock: socket.socket, rank: int, on_message: OnMessage, on_lost: OnLost,
                 silence_timeout: float = HEARTBEAT_TIMEOUT):
        self.sock = sock
        self.silence_timeout = silence_timeout
        self.rank = rank
        self.on_message = on_message
        self.on_lost = on_lost
        self.closed = threading.Event()
        self._send_lock = threading.Lock()
        self._buf = b""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(HEARTBEAT_INTERVAL)

    def start(self) -> None:
        threading.Thread(target=self._read_loop, name=f"rdzv-read-{self.rank}", daemon=True).start()
        threading.Thread(target=self._beat_loop, name=f"rdzv-beat-{self.rank}", daemon=True).start()

    def send(self, msg: dict) -> bool:
        return self.send_raw(encode(msg))

    def send_raw(self, data: bytes) -> bool:
        try:
            with self._send_lock:
                self.sock.sendall(data)
            return True
        except OSError:
            return False

    def read_line(self, timeout: float) -> Optional[dict]:
        """Blocking read of one message (used for the hello before the reader thread starts)."""
        deadline = time.time() + timeout
        while b"\n" not in self._buf:
            if time.time() > deadline:
                return None
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _lost(self, reason: str) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.on_lost(self.rank, reason)

    def _read_loop(self) -> None:
        last = time.time()
        while not self.closed.is_set():
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                if time.time() - last > self.silence_timeout:
                    return self._lost(f"{SILENT}: nothing received for {self.silence_timeout:.0f} s")
                continue
            except OSError as e:
                return self._lost(f"connection error: {e}")
            if not chunk:
                return self._lost("connection closed by peer")
            last = time.time()
            self._buf += chunk
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("t") != "hb":
                    self.on_message(self.rank, msg)

    def _beat_loop(self) -> None:
        while not self.closed.wait(HEARTBEAT_INTERVAL):
            if not self.send({"t": "hb"}):
                return


class Hub:
    """Rank 0's side: accepts nnodes - 1 peers, tracks their phase, broadcasts."""

    def __init__(self, port: int, nnodes: int, on_message: OnMessage, on_lost: OnLost,
                 silence_timeout: float = HEARTBEAT_TIMEOUT):
        self.port = port
        self.nnodes = nnodes
        self.silence_timeout = silence_timeout
        self.on_message = on_message
        self.on_lost = on_lost
        self.peers: dict[int, Conn] = {}
        self.phase: dict[int, set[str]] = {}
        self.cond = threading.Condition()
        self._server: Optional[socket.socket] = None
        self.closing = False
        self._seq = 0
        self._pad = 0
        self._sender: Optional[threading.Thread] = None
        self._echoed: dict[int, int] = {}

    def start(self) -> None:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("", self.port))
        except OSError as e:
            srv.close()
            raise RendezvousError(
                f"The server socket has failed to listen on any local network address. port: {self.port}, "
                f"useIpv6: 0, code: -{e.errno}, name: {getattr(e, 'strerror', e)}") from None
        srv.listen(64)
        srv.settimeout(0.5)
        self._server = srv
        threading.Thread(target=self._accept_loop, name="rdzv-accept", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self.closing:
            try:
                sock, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        conn = Conn(sock, -1, self._message, self._lost, self.silence_timeout)
        try:
            hello = conn.read_line(10.0)
        except (OSError, ValueError):
            hello = None
        rank = hello.get("rank") if hello and hello.get("t") == "hello" else None
        with self.cond:
            ok = (isinstance(rank, int) and 0 < rank < self.nnodes and rank not in self.peers
                  and hello.get("nnodes") == self.nnodes)
            if ok:
                conn.rank = rank
                self.peers[rank] = conn
                self.phase[rank] = set()
                self.cond.notify_all()
        if not ok:
            conn.send({"t": "reject", "reason": f"bad hello {hello!r} (nnodes={self.nnodes})"})
            conn.close()
            return
        conn.start()
        if len(self.peers) == self.nnodes - 1:
            self.broadcast({"t": "joined"})

    def _message(self, rank: int, msg: dict) -> None:
        if msg.get("t") == "ar":
            with self.cond:
                self._echoed[rank] = max(self._echoed.get(rank, 0), int(msg.get("s", 0)))
                self.cond.notify_all()
            return
        if msg.get("t") == "phase":
            with self.cond:
                self.phase.setdefault(rank, set()).add(msg.get("phase", ""))
                self.cond.notify_all()
        self.on_message(rank, msg)

    def _lost(self, rank: int, reason: str) -> None:
        if not self.closing:
            self.on_lost(rank, reason)

    def wait_joined(self, timeout: float, stop: threading.Event) -> bool:
        return self._wait(lambda: len(self.peers) == self.nnodes - 1, timeout, stop)

    def wait_phase(self, phase: str, stop: threading.Event, timeout: Optional[float] = None) -> bool:
        return self._wait(lambda: all(phase in self.phase.get(r, ()) for r in range(1, self.nnodes)), timeout, stop)

    def _wait(self, pred, timeout: Optional[float], stop: threading.Event) -> bool:
        deadline = None if timeout is None else time.time() + timeout
        with self.cond:
            while not pred():
                if stop.is_set() or (deadline is not None and time.time() > deadline):
                    return False
                self.cond.wait(0.2)
            return True

    def broadcast(self, msg: dict) -> None:
        data = encode(msg)
        for conn in list(self.peers.values()):
            conn.send_raw(data)

    def exchange_begin(self, pad_bytes: int) -> int:
        """Start one forward's exchange with every peer; returns its sequence number. The sending
        happens on a thread of its own, so the forward's modelled time covers it."""
        with self.cond:
            self._seq += 1
            seq = self._seq
            if self._sender is None:
                self._sender = threading.Thread(target=self._send_loop, name="rdzv-exchange", daemon=True)
                self._sender.start()
            self._pad = pad_bytes
            self.cond.notify_all()
        return seq

    def _send_loop(self) -> None:
        sent = 0
        while not self.closing:
            with self.cond:
                while self._seq == sent and not self.closing:
                    self.cond.wait(0.5)
                sent, pad = self._seq, self._pad
            self.broadcast({"t": "ar", "s": sent, "p": "x" * pad})

    def exchange_wait(self, seq: int, stop: threading.Event) -> bool:
        """Wait until every live peer echoed `seq` (a lost peer is not waited for: its loss is
        reported through on_lost, which takes the process down). False when stopped."""
        with self.cond:
            while any(self._echoed.get(r, 0) < seq for r, c in self.peers.items() if not c.closed.is_set()):
                if stop.is_set() or self.closing:
                    return False
                self.cond.wait(0.05)
            return True

    def close(self) -> None:
        self.closing = True
        for conn in list(self.peers.values()):
            conn.close()
        if self._server is not None:
            self._server.close()


class Link:
    """A rank >= 1's connection to rank 0."""

    def __init__(self, rank: int, nnodes: int, on_message: OnMessage, on_lost: OnLost,
                 silence_timeout: float = HEARTBEAT_TIMEOUT):
        self.rank = rank
        self.nnodes = nnodes
        self.silence_timeout = silence_timeout
        self.on_message = on_message
        self.on_lost = on_lost
        self.conn: Optional[Conn] = None
        self.closing = False

    def connect(self, host: str, port: int, timeout: float, stop: threading.Event) -> None:
        """Retry until rank 0 accepts, or raise RendezvousError after `timeout` seconds."""
        deadline = time.time() + timeout
        last_error = ""
        while not stop.is_set():
            try:
                sock = socket.create_connection((host, port), timeout=2.0)
                break
            except OSError as e:
                last_error = str(e)
                if time.time() > deadline:
                    raise RendezvousError(
                        f"torch.distributed.DistNetworkError: The client socket has timed out after {timeout:.0f}s "
                        f"while trying to connect to ({host}, {port}). Last error: {last_error}") from None
                stop.wait(CONNECT_RETRY)
        else:
            raise RendezvousError("interrupted while connecting")
        self.conn = Conn(sock, 0, self.on_message, self._lost, self.silence_timeout)
        self.conn.send({"t": "hello", "rank": self.rank, "nnodes": self.nnodes})
        self.conn.start()

    def _lost(self, rank: int, reason: str) -> None:
        if not self.closing:
            self.on_lost(rank, reason)

    def send(self, msg: dict) -> bool:
        return self.conn.send(msg) if self.conn else False

    def echo(self, msg: dict) -> None:
        """Answer rank 0's per-forward exchange with as many bytes as it sent."""
        self.send({"t": "ar", "s": msg.get("s", 0), "p": msg.get("p", "")})

    def close(self) -> None:
        self.closing = True
        if self.conn:
            self.conn.close()
