"""Realistic failure texts (Python tracebacks as SGLang 0.5.x prints them) for the emulated faults.

The collector classifies runs by these signatures (``torch.OutOfMemoryError``, ``Scheduler hit an
exception``, ``Received sigquit from a child process``), so the frames name the real modules.
"""
from __future__ import annotations

import time

SITE = "/usr/local/lib/python3.12/dist-packages"
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."


def _frames(frames: list[tuple[str, int, str, str]]) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{SITE}/{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    return "\n".join(lines)


_LOOP = [
    ("sglang/srt/managers/scheduler.py", 3431, "run_scheduler_process", "scheduler.run_event_loop()"),
    ("sglang/srt/managers/scheduler.py", 1187, "run_event_loop", "dispatch_event_loop(self)"),
    ("sglang/srt/managers/scheduler.py", 3347, "dispatch_event_loop", "scheduler.event_loop_normal()"),
    ("torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
    ("sglang/srt/managers/scheduler.py", 1225, "event_loop_normal", "result = self.run_batch(batch)"),
    ("sglang/srt/managers/scheduler.py", 2547, "run_batch",
     "batch_result = self.model_worker.forward_batch_generation(model_worker_batch)"),
]


# config.json model_type -> SGLang's model module (DeepseekV3ForCausalLM lives in deepseek_v2.py)
_MODULE = {"deepseek_v3": "deepseek_v2"}


def oom_traceback(model_type: str, speculative: str | None, oom_text: str) -> str:
    """The first-big-prefill OOM in the FlashInfer MXFP4 MoE workspace allocation."""
    module = _MODULE.get(model_type, model_type)
    frames = list(_LOOP)
    if speculative:
        worker = "dflash_worker_v2.py" if speculative == "DFLASH" else "eagle_worker_v2.py"
        frames.append((f"sglang/srt/speculative/{worker}", 612, "forward_batch_generation",
                       "batch_output = self.target_worker.forward_batch_generation(model_worker_batch)"))
    frames += [
        ("sglang/srt/managers/tp_worker.py", 402, "forward_batch_generation",
         "logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)"),
        ("sglang/srt/model_executor/model_runner.py", 2391, "forward", "output = self._forward_raw("),
        ("sglang/srt/model_executor/model_runner.py", 2468, "_forward_raw", "ret = self.forward_extend("),
        ("sglang/srt/model_executor/model_runner.py", 2320, "forward_extend", "return self.model.forward("),
        (f"sglang/srt/models/{module}.py", 1290, "forward",
         "hidden_states = self.model(input_ids, positions, forward_batch, input_embeds)"),
        ("torch/nn/modules/module.py", 1775, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        ("torch/nn/modules/module.py", 1786, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"sglang/srt/models/{module}.py", 1104, "forward",
         "hidden_states, residual = layer(positions, hidden_states, forward_batch, residual)"),
        ("sglang/srt/layers/moe/fused_moe_triton/layer.py", 1042, "forward",
         "final_hidden_states = self.run_moe_core(dispatch_output)"),
        ("sglang/srt/layers/quantization/mxfp4.py", 1186, "apply",
         "return self._apply_flashinfer_mxfp4(layer, dispatch_output)"),
        ("flashinfer/fused_moe/core.py", 2135, "trtllm_fp4_block_scale_moe",
         "return get_trtllm_moe_sm100_module().trtllm_fp4_block_scale_moe("),
        ("flashinfer/fused_moe/core.py", 1738, "trtllm_fp4_block_scale_moe_op",
         "workspace = _allocate_workspace(num_tokens, hidden_size, num_experts, top_k, device)"),
        ("flashinfer/fused_moe/core.py", 412, "_allocate_workspace",
         "return torch.empty(workspace_bytes, dtype=torch.uint8, device=device)"),
    ]
    return _frames(frames) + f"\ntorch.OutOfMemoryError: {oom_text}"


def scheduler_crash_traceback() -> str:
    """An asynchronous CUDA failure in the decode loop (fault ``die_after_requests``)."""
    frames = list(_LOOP) + [
        ("sglang/srt/managers/tp_worker.py", 402, "forward_batch_generation",
         "logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)"),
        ("sglang/srt/model_executor/model_runner.py", 2391, "forward", "output = self._forward_raw("),
        ("sglang/srt/model_executor/model_runner.py", 2455, "_forward_raw",
         "ret = self.graph_runner.replay(forward_batch)"),
    ]
    return _frames(frames) + (
        "\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")


def load_crash_traceback() -> str:
    """A node that dies while loading weights (fault ``crash_rank``)."""
    frames = [
        ("sglang/srt/managers/scheduler.py", 3405, "run_scheduler_process",
         "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
        ("sglang/srt/managers/scheduler.py", 412, "__init__", "self.init_model_worker()"),
        ("sglang/srt/managers/tp_worker.py", 118, "__init__", "self.model_runner = ModelRunner("),
        ("sglang/srt/model_executor/model_runner.py", 391, "__init__", "self.initialize(min_per_gpu_memory)"),
        ("sglang/srt/model_executor/model_runner.py", 512, "initialize", "self.load_model()"),
        ("sglang/srt/model_executor/model_runner.py", 1003, "load_model",
         "self.model = get_model(model_config=self.model_config, load_config=self.load_config,"),
        ("sglang/srt/model_loader/loader.py", 642, "load_model",
         "self.load_weights_and_postprocess(model, self._get_all_weights(model_config, model), target_device)"),
    ]
    return _frames(frames) + "\nRuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def peer_lost_traceback(peer: str) -> str:
    """What a scheduler sees when another node of the replica disappears (NCCL)."""
    frames = list(_LOOP) + [
        ("sglang/srt/managers/tp_worker.py", 402, "forward_batch_generation",
         "logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)"),
        ("sglang/srt/distributed/parallel_state.py", 512, "all_reduce",
         "return torch.ops.sglang.outplace_all_reduce(input_, group_name=self.unique_name)"),
    ]
    return _frames(frames) + (
        "\ntorch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        f"remote process exited or there was a network error, NCCL version 2.27.3\n"
        f"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
        f"Last error:\nsocket recv failed: connection to {peer} closed by peer\n")


def watchdog_lines(rank: int, timeout_ms: int, ran_ms: int, seq: int = 3) -> list[str]:
    """torch's ProcessGroupNCCL watchdog when a collective never completes (a peer's link is down),
    then the abort that takes the process down (torch 2.6-2.8 wording and source lines)."""
    now_ns = time.time_ns()      # one reading: the seconds and their fraction must agree
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now_ns // 1_000_000_000))
    nanos = f"{now_ns % 1_000_000_000:09d}"
    head = f"[rank{rank}]:[E{stamp}.{nanos} ProcessGroupNCCL.cpp:"
    work = (f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) "
            f"ran for {ran_ms} milliseconds before timing out.")
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    return [
        f"{head}616] [Rank {rank}] Watchdog caught collective operation timeout: {work}",
        f"{head}1785] {pg} Exception (either an error or timeout) detected by watchdog at work: {seq}, "
        f"last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
        f"{head}1834] {pg} Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, "
        f"last completed NCCL work: {seq - 1}.",
        f"{head}630] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{head}636] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
    ]
