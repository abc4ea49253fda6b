"""SGLang engine emulator: ``python3 -m slurm_ab_testbed.emulator [SGLang launch_server flags]``.

The only stand-in for the GPU engine in slurm-ab's local stack. The job script renders one SGLang
command; on the local cluster ``python3 -m sglang.launch_server`` is replaced by this module and
nothing else changes, so the emulator must be faithful wherever the rest of the system looks:
flags (names, aliases, abbreviations, defaults, choices and SGLang's post-parse rules), multi-node
rendezvous and readiness, HTTP endpoints and stream formats used by ``sglang.bench_serving`` and
``sglang-router``, log lines parsed by the collector, and failure signatures.

Emulator-only knobs come from the environment, never from flags:

======================================  ======================================================================
variable                                meaning
======================================  ======================================================================
``SLURM_AB_EMU_CONFIG``                 TOML overriding any key of ``costs.toml`` (same sections/keys; unknown
                                        keys are an error)
``SLURM_AB_EMU_TIME_SCALE``             multiplies every emulated duration (startup phases, prefill chunks,
                                        decode steps); default 1.0, tests use 0.005-0.02. Logged throughputs
                                        and client timings are wall-clock, so they scale by 1/scale together
``SLURM_AB_EMU_LOG_VERSION``            SGLang log/API generation: ``0.5.23`` (default), ``0.5.6``,
                                        ``0.4.10`` (sglang.md §3: separators, trailing ", ", prefill fields,
                                        accept-rate definition; ``/server_info``, ``/model_info``, ``/ready``
                                        are 404 before 0.5.23, as are their meta_info spec extras)
``SLURM_AB_EMU_FAULT``                  comma list: ``hang_startup`` (rank 0 stops after "Load weight begin",
                                        never healthy), ``die_after_requests=N`` (rank 0 scheduler crashes once
                                        N user requests finished; on a PD prefill's nodes: its decode loses it),
                                        ``crash_rank=R`` (node rank R dies while loading), ``oom_first_prefill``
                                        (first user prefill OOMs regardless of memory), ``bind_loopback``;
                                        PD (faults.py, pd.py): ``pd_role=null|prefill|decode`` (serves as that
                                        role whatever --disaggregation-mode says: a role mismatch),
                                        ``pd_engine_init_fail`` (KV transfer engine fails to start on every
                                        GPU rank), ``pd_no_transfer_module`` (its module is missing),
                                        ``pd_bootstrap_timeout`` (decode -> prefill KV metadata is lost: the
                                        prefill times out bootstrapping, the decode waiting),
                                        ``pd_transfer_hang_after=N`` (on a prefill: its KV transfers hang once
                                        N user requests finished there; the decode's waiting timeout fails
                                        them) and ``kv_pool_tokens=N`` (KV pool of N tokens: decode KV
                                        exhaustion); correctness (outputs.py): ``divergence=K`` (a
                                        speculative server's output differs from position K on for about
                                        half of all prompts), ``empty_output`` (requests stop at an EOS
                                        first token)
``SLURM_AB_EMU_FAULT_NODES``            comma list of Slurm node names (``SLURMD_NODENAME``): faults apply
                                        only to the processes on these nodes (break one replica of a job)
``SLURM_AB_EMU_SEED``                   RNG seed (acceptance draws, step jitter, output tokens); default
                                        ``--random-seed`` or 0
``SLURM_AB_EMU_GPUS_PER_NODE``          emulated GPUs per node (default 8); tp*pp must equal nnodes * this
``SLURM_AB_EMU_COLLECTIVE_BYTES``       bytes each peer node exchanges with node rank 0 per forward (default
                                        4096, 0: none): the stand-in for NCCL's per-step collectives, so a
                                        slow or rate-limited link of any node slows its whole replica
``SLURM_AB_EMU_GPU_STATE_DIR``          where each node writes its GPUs' activity for the fake nvidia-smi
                                        (``../gpu_activity.py``; default ``/tmp/slurm-ab-emu-gpus``)
``SGLANG_LOG_MS``                       SGLang's own switch: millisecond timestamps ``[... HH:MM:SS.mmm ...]``
``SGLANG_TORCH_PROFILER_DIR``           SGLang's own: where ``/start_profile`` writes traces without an
                                        ``output_dir`` (default ``/tmp``; profiler.py)
``SGLANG_DISAGGREGATION_*``             SGLang's own PD timeouts, real seconds: ``BOOTSTRAP_TIMEOUT`` (300),
                                        ``WAITING_TIMEOUT`` (300), ``HEARTBEAT_INTERVAL`` (5, >= 2),
                                        ``HEARTBEAT_MAX_FAILURE`` (2); ``SGLANG_HOST_IP`` / ``HOST_IP``: the
                                        address a PD rank advertises (else the route to 8.8.8.8, else the
                                        hostname, as get_local_ip_auto)
======================================  ======================================================================

Cost model (``costs.py``, defaults and per-key documentation in ``costs.toml``; all at scale 1):

- prefill, per full pass per token: ``compute_ms_per_token/tp + 0.02 ms (tp>1) + 0.063 ms x (nodes
  spanned by the TP group - 1)``; with pp > 1 a chunk costs 1/pp of that per stage + 2 ms, the first
  chunk after the pipeline drained pays all stages, back-to-back chunks overlap; +15 ms per batch.
- decode step of a micro-batch of m: ``280 ms/tp + 6 ms (tp>1) + 10.3 ms x (extra nodes) + 1 ms x m
  + 0.05 ms per 1k context tokens + 3.8 ms x (pp-1)``; the running batch is split into min(batch, pp)
  micro-batches, so with fewer requests than stages a token still costs a full pass (bubbles).
- speculative: a verify step = decode step x (1 + 0.24 x (num_draft_tokens-1)) + 15 ms draft;
  accepted length per step = 1 + truncated geometric around a per-request lognormal mean
  (DFLASH 4.1, cv 0.25) which logs as accept len ~3.7 / accept rate ~0.18 with 16 draft tokens.
- memory: KV pool = what ``mem_fraction_static`` leaves after weights; the first prefill whose
  request reaches 16384 tokens allocates the FlashInfer MXFP4 MoE workspace (5 GiB, +3 GiB with
  speculative decoding) from ``178.35 GiB x (1 - mem_fraction_static) - 18 GiB``: with a speculative
  algorithm 0.86 fails (OOM traceback, "Scheduler hit an exception", "Received sigquit ...", the
  process SIGKILLs itself like SGLang's kill_process_tree; the in-flight request's connection drops),
  0.85 and 0.83 work (threshold ~0.854; ~0.871 without speculative decoding).

``python3 -m slurm_ab_testbed.emulator.simulate -- FLAGS`` runs the same scheduler in virtual time and prints
what a benchmark would give. Defaults, 2 replicas x 4 nodes, 40 prompts 16K -> 512, C=8 (seed in
brackets): tp32 235 s, TPOT 77 ms (238 s, 76 ms); TP4 PP8 365 s, TPOT 127 ms (370 s, 127 ms);
tp32 + DFLASH 315 s, TPOT 96 ms, accept len 3.7 (300 s, 98 ms, 3.76).

Prefill/decode disaggregation (``--disaggregation-mode prefill|decode`` and SGLang 0.5.23's other PD
flags and rules, pd_args.py): the prefill leader runs the bootstrap server on
``--disaggregation-bootstrap-port`` and every prefill node registers its ranks with it; the router's
``bootstrap_host/port/room`` (in /generate and the OpenAI bodies) pair a request's two halves; the
decode fetches the prefill's layout (page size and KV dtype must match), reserves KV, announces its
destination; the prefill computes the prompt and the first token and pushes
the model's KV for the prompt (``[pd]``, pd_kv: every node pair, a fraction on the wire) to the decode (really across the
nodes' link: a tbf-limited link slows TTFT), answers once acknowledged; the decode streams that
first token and decodes the rest (speculative decoding included). Both roles print SGLang's PD
fields in their batch lines (version-aware), export its PD metrics (``engine_type`` label) and stay
healthy while transfers fail (/health and the warm-up use the fake bootstrap host). Every node of
both roles takes part in the transfer (each prefill node pushes its ranks' KV to its decode node).
Module docstrings of pd*.py name the SGLang sources.

Logs: SGLang-logger lines on stderr as ``[YYYY-mm-dd HH:MM:SS{.mmm}{ ranks}] msg`` with ranks
`` DPd PPk TPt EPe`` as in SGLang; uvicorn access lines on stdout. Startup lines are printed for every
GPU of the node; "Prefill batch"/"Decode batch" and ``max_total_num_tokens=...`` only by the TP0 of
each PP stage, i.e. on node 0 when pp == 1 and, with pp > 1, on the node hosting stage k's TP0 with
prefix ``PPk`` (rank 0 sends the lines over the rendezvous connection). ``/health`` on an idle
server runs a 1-token generation, which logs ``Prefill batch ... #new-token: 1`` as SGLang does.

Prefix cache (``radix.py``, on unless ``--disable-radix-cache``), deterministic greedy outputs
(``outputs.py``), profiles (``profiler.py``) and the analytic capacity (``capacity.py``): see their
docstrings and docs/testbed.md.

Modules: ``cli_args`` (flags and rules), ``knobs``/``faults`` (environment), ``costs`` + ``costs.toml``,
``memory``, ``topology`` (ranks -> nodes, prefixes), ``logfmt`` (exact line formats), ``tracebacks``,
``tokenizer``, ``scheduler`` (pure batching state machine), ``engine`` (real-time driver), ``http_api``,
``rendezvous`` (TCP + heartbeats + the per-forward exchange), ``node`` (startup/shutdown per rank), ``build``, ``simulate``,
``radix``, ``outputs``, ``profiler``, ``capacity``;
PD: ``pd`` (shared), ``pd_args``, ``pd_node`` (start-up), ``pd_bootstrap``, ``pd_transfer``, ``pd_prefill``,
``pd_decode``, ``pd_core``, ``pd_metrics``.
Beside it in ``slurm_ab_testbed``: ``make_model`` (tokenizer-only model dir), ``make_speed_bench`` and
``make_mooncake_trace`` (datasets), ``fake_gpus`` + ``gpu_activity`` (nvidia-smi stand-in and its
telemetry), ``testing`` (subprocess helpers for tests), ``cluster`` + ``cluster.sh`` (the local Slurm cluster).
"""
