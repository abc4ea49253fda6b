"""The job script's /metrics scraping (functions.sh: scrape_metrics, scrape_metrics_during) in bash:
raw text kept as served, one events.log line per scrape, failures recorded and never fatal; the
collector then reads what the functions wrote."""
from __future__ import annotations

import http.server
import socket
import subprocess
import threading
from pathlib import Path

from helpers.scripts import layout_formats
from slurm_ab.model.rundir import Layout
from slurm_ab.collect.records import ReplicaSummary
from slurm_ab.collect.server_metrics import collect_server_metrics
from slurm_ab.parse.events import read_events

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "sglang-0.5.23-metrics"


def _functions() -> str:
    text = (ROOT / "sbatch_templates" / "functions.sh").read_text()
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("{%"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scrapes_keep_raw_text_and_failures_are_not_fatal(tmp_path):
    body = (DATA / "end.prom").read_bytes()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    up, down = srv.server_address[1], _closed_port()
    script = tmp_path / "harness.sh"
    script.write_text(f"""set -uo pipefail
RUN_DIR={tmp_path}
{layout_formats()}
{_functions()}
trap - EXIT TERM INT USR1
HEADS=(127.0.0.1 127.0.0.1); PORTS=({up} {down}); ADDRESS_MODE=name
R0_NODES=(127.0.0.1 127.0.0.2); R1_NODES=(127.0.0.1)
ROUTER_HOST=127.0.0.1; ROUTER_METRICS_PORT={down}
METRICS_SERVERS=1; METRICS_INTERVAL=1; METRICS_TIMEOUT=2
event hosts replica=0 head=127.0.0.1 port={up}
event hosts replica=1 head=127.0.0.1 port={down}
event bench_start
scrape_metrics start
sleep 3.5 &
CLIENT_PID=$!
scrape_metrics_during "$CLIENT_PID"
wait "$CLIENT_PID"
event bench_end rc=0
scrape_metrics end
echo done
""")
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    srv.shutdown()
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
    ev = [e for e in read_events(Layout(tmp_path).events).named("metrics_scrape")]
    # every node of a replica on the replica's port: r<G>n<R>, with the node's name
    for target, node in (("r0n0", "127.0.0.1"), ("r0n1", "127.0.0.2")):
        r0 = [e.fields for e in ev if e.fields["target"] == target]
        assert [f["phase"] for f in r0][0] == "start" and r0[-1]["phase"] == "end"
        assert any(f["phase"] == "during" for f in r0) and all(f["ok"] == "1" for f in r0)
        assert {f["node"] for f in r0} == {node}
        assert [f["round"] for f in r0][0] == "start" and r0[-1]["round"] == "end"
        for f in r0:                                    # raw, byte for byte
            assert f["file"].startswith(f"metrics/{target}-") and (tmp_path / f["file"]).read_bytes() == body
    failed = [e.fields for e in ev if e.fields["target"] in ("r1n0", "router")]
    assert failed and all(f["ok"] == "0" and f["curl_rc"] == "7" and f["http"] == "000" for f in failed)
    assert all((tmp_path / f["file"]).is_file() and f["file"].endswith(".err") for f in failed)
    assert not list((tmp_path / "metrics").glob("*.part")) + list((tmp_path / "metrics").glob("*.curl"))
    # the collector reads what the job wrote: replica 0 has its window, replica 1 a recorded failure
    sm = collect_server_metrics(tmp_path, read_events(Layout(tmp_path).events),
                                [ReplicaSummary(replica=0), ReplicaSummary(replica=1)], None, None)
    assert sm.available and sm.replicas[0].exposed and not sm.replicas[1].exposed
    assert sm.replicas[0].gen_tokens == 0          # the same text at both ends: no increase
    assert any("replica 1 /metrics:" in n and "scrapes failed" in n for n in sm.notes)
