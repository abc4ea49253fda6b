"""Multi-node replicas on localhost: rendezvous, readiness only on rank 0, dummy health servers,
PP-stage log lines on the hosting node, and death propagation in both directions."""
import json
import signal
import time
import urllib.request


from slurm_ab_testbed.testing import DECODE_RE, PREFIX, free_ports, http_get, wait_healthy




def replica(procs, model_dir, layout=("--tp-size", "16"), nnodes=2, env=None, hosts=None, extra=()):
    port, dport = free_ports(2)
    nodes = []
    for rank in reversed(range(nnodes)):        # workers first: they must wait for rank 0
        host = hosts[rank] if hosts else "127.0.0.1"
        argv = ["--model-path", model_dir, *layout, "--ep-size", "4", "--nnodes", str(nnodes),
                "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dport}", "--host", host,
                "--port", str(port), "--chunked-prefill-size", "8192", *extra]
        nodes.insert(0, procs.start(argv, f"n{rank}", env))
        if rank:
            time.sleep(0.3)
    return nodes, f"http://127.0.0.1:{port}", port


def generate(url, n_in=3000, n_out=30):
    req = urllib.request.Request(url + "/generate", data=json.dumps(
        {"input_ids": [5] * n_in, "sampling_params": {"max_new_tokens": n_out}}).encode())
    return json.loads(urllib.request.urlopen(req, timeout=30).read())


def test_two_node_startup_dummy_health_and_clean_stop(procs, model_dir):
    (n0, n1), url, port = replica(procs, model_dir, hosts=["127.0.0.1", "127.0.0.2"])
    assert n1.wait_log("Init torch distributed begin.", 10)
    assert wait_healthy(url, 30), n0.text() + n1.text()
    assert generate(url)["meta_info"]["completion_tokens"] == 30
    assert n1.wait_log(f"Dummy health check server started in background thread at 127.0.0.2:{port}", 5)
    for path in ("/health", "/health_generate", "/ping"):
        assert http_get(f"http://127.0.0.2:{port}{path}")[0] == 200
    assert "fired up" not in n1.text() and n0.text().count("The server is fired up and ready to roll!") == 1
    assert "Load weight end." in n1.text() and " TP8 EP2] Load weight begin." in n1.text()
    assert not any(PREFIX.match(line) for line in n1.text().splitlines())  # pp == 1: only node 0 prints stats
    for n in (n0, n1):
        n.p.send_signal(signal.SIGTERM)
    assert n0.wait_exit(10) == 0 and n1.wait_exit(10) == 0


def test_port_clash_on_shared_host_is_a_warning(procs, model_dir):
    (n0, n1), url, port = replica(procs, model_dir)
    assert wait_healthy(url, 30)
    assert n1.wait_log("dummy health check server not started", 5)
    assert n1.p.poll() is None


def test_pp_stage_lines_are_printed_where_the_stage_tp0_lives(procs, model_dir):
    (n0, n1), url, _ = replica(procs, model_dir, layout=("--tp-size", "4", "--pp-size", "4"),
                               extra=("--decode-log-interval", "10"))
    assert wait_healthy(url, 30)
    generate(url, 16384, 25)
    time.sleep(0.3)
    def stages(text):
        return {m["ranks"] for m in map(PREFIX.match, text.splitlines()) if m}
    assert stages(n0.text()) == {" PP0 TP0 EP0", " PP1 TP0 EP0"}
    assert stages(n1.text()) == {" PP2 TP0 EP0", " PP3 TP0 EP0"}
    assert any(DECODE_RE.search(line) for line in n1.text().splitlines())


def test_worker_exits_when_rank0_dies(procs, model_dir):
    (n0, n1), url, _ = replica(procs, model_dir)
    assert wait_healthy(url, 30)
    n0.p.send_signal(signal.SIGKILL)
    t = time.time()
    code = n1.wait_exit(10)
    assert code not in (None, 0) and time.time() - t < 4
    assert "Received sigquit from a child process" in n1.text() and "Scheduler hit an exception" in n1.text()


def test_rank0_exits_when_a_worker_dies(procs, model_dir):
    (n0, n1), url, _ = replica(procs, model_dir)
    assert wait_healthy(url, 30)
    n1.p.send_signal(signal.SIGKILL)
    code = n0.wait_exit(10)
    assert code not in (None, 0)
    log = n0.text()
    assert "Lost connection to node rank 1" in log and "Received sigquit from a child process" in log


def test_crash_rank_during_loading(procs, model_dir):
    (n0, n1), url, _ = replica(procs, model_dir, env={"SLURM_AB_EMU_FAULT": "crash_rank=1"})
    assert n1.wait_exit(15) not in (None, 0)
    assert n0.wait_exit(10) not in (None, 0)
    assert "uncorrectable ECC error" in n1.text() and "fired up" not in n0.text()
