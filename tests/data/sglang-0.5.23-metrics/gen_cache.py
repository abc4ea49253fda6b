"""Produce /metrics text exactly as SGLang 0.5.23's own collector classes render it (CPU, no server)."""
import dataclasses, os, sys, tempfile
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp())
from prometheus_client import generate_latest, REGISTRY
from sglang.srt.server_args import ServerArgs
from sglang.srt.observability import metrics_collector as mc

sa = ServerArgs(model_path="/shared/models/Kimi-K3", enable_metrics=True)
from sglang.srt.runtime_context import get_context
get_context().set_server_args(sa)
tok_labels = {"model_name": "/shared/models/Kimi-K3", "engine_type": "unified"}
sched_labels = {"model_name": "/shared/models/Kimi-K3", "engine_type": "unified", "tp_rank": 0, "pp_rank": 0, "moe_ep_rank": 0}
try:
    t = mc.TokenizerMetricsCollector(server_args=sa, labels=tok_labels)
except Exception as e:
    print("tokenizer collector failed:", repr(e), file=sys.stderr); t = None
try:
    s = mc.SchedulerMetricsCollector(labels=sched_labels, server_args=sa)
except Exception as e:
    print("scheduler collector failed:", repr(e), file=sys.stderr); s = None
phase = sys.argv[1] if len(sys.argv) > 1 else "end"
if t is not None and phase == "end":
    # 20 finished requests of 16384 -> 512 with DFlash (accept length ~3.76 -> ~136 verify calls each)
    for i in range(20):
        t.observe_one_finished_request(labels=tok_labels, prompt_tokens=16384, generation_tokens=512,
            cached_tokens=(8192 if i % 2 else 0), cached_tokens_details=({"device": 8192, "host": 0} if i % 2 else None), e2e_latency=58.4, has_grammar=False, spec_verify_ct=136,
            is_streaming=True, time_per_output_token=0.098)
if s is not None:
    st = mc.SchedulerStats()
    st.num_running_reqs = mc.QueueCount(total=4); st.num_queue_reqs = mc.QueueCount(total=0)
    for k, v in dict(token_usage=0.31, full_token_usage=0.31, gen_throughput=41.3,
                     spec_accept_length=3.76, spec_accept_rate=0.184).items():
        if hasattr(st, k): setattr(st, k, v)
    s.increment_realtime_tokens(dp_cooperation_info=None, prefill_compute_tokens=100, prefill_cache_tokens=50, decode_tokens=10); s.increment_effective_prefill_tokens(input_tokens=100, device_hit_tokens=50, host_hit_tokens=0, storage_hit_tokens=0)
    try: s.log_stats(st)
    except Exception as e: print("log_stats failed:", repr(e), file=sys.stderr)
from prometheus_client import CollectorRegistry, multiprocess
reg = CollectorRegistry(); multiprocess.MultiProcessCollector(reg)   # as SGLang's /metrics does
sys.stdout.write(generate_latest(reg).decode())
