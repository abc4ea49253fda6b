{% raw %}
# ---- helpers (static) ------------------------------------------------------------------------
declare -A STEP_PIDS=()   # step name -> srun pid; all are critical: if one exits, the job fails
SAMPLER_PIDS=()           # telemetry samplers (telemetry.sh): not critical, ended by the teardown
PF_PIDS=()                # preflight steps (one per component)
TORN_DOWN=0
CANCELLED=0               # slurm-ab cancel asked this job to stop (on_time_limit)
WARMUP_BODY=""

log() { printf '%s slurm-ab: %s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*"; }

# Milliseconds since the epoch (GNU date): bash's own microsecond clock variable is bash 5 only,
# and its decimal point is the locale's.
# shellcheck disable=SC2317  # runs from a trap (teardown)
now_ms() { date '+%s%3N'; }

# rpath FORMAT [ARG...]: a file of the run directory (a launch's: of its directory) from one of the
# generated F_* formats (rundir.Layout names every file; this script spells none).
rpath() {
  local fmt=$1
  shift
  # shellcheck disable=SC2059  # the format is a generated F_* (rundir.Layout), never data
  printf "%s/$fmt" "$RUN_DIR" "$@"
}

# The events file: "<epoch_s.ms> <YYYY-mm-dd HH:MM:SS.mmm> <event> [key=value ...]", read by the collector.
event() {
  local stamp
  stamp=$(date '+%s.%3N %Y-%m-%d %H:%M:%S.%3N' 2>/dev/null)
  # date killed by the teardown's signal (a background scrape's event): bash's own clock, whole
  # seconds (printf %(...)T, bash 4.2+), never a line without its time
  [[ -n $stamp ]] || stamp="$(printf '%(%s)T.000 %(%Y-%m-%d %H:%M:%S)T.000' -1 -1)"
  printf '%s %s\n' "$stamp" "$*" >>"$RUN_DIR/$F_EVENTS"
}

tail_log() {
  local f
  for f in "$@"; do
    [[ -s "$f" ]] || continue
    printf '%s\n' "---- last lines of $f ----" >&2
    tail -n 20 -- "$f" >&2
  done
}

# fatal KIND [key=value ...] MESSAGE: record why the job fails; the EXIT trap tears down.
fatal() {
  local kind=$1 msg=${*: -1}
  local -a kv=("${@:2:$#-2}")
  log "FATAL: $msg" >&2
  event fail "kind=$kind" "${kv[@]}"
  exit 1
}

# Sleep one poll interval, interruptible by signals (a plain foreground sleep delays traps).
nap() {
  sleep "$POLL" &
  wait $! 2>/dev/null
}

# in_image G ENV: the one builder of what puts a step of het group G in the launch's image with its
# environment (every step: preflight, servers, router, client, samplers, capacity search, stop rule).
# CT, srun's options: the pyxis flags (CONTAINER, and with container.name one container per node,
# job, image and group: --container-name=<name>-<job id>[-i<K>]-<G>); IN_IMAGE, the words before the
# step's command: the exec runtime's (IMAGE_EXEC), then env with the submitter's locale (STEP_LOCALE),
# the cache's variables and ENV's words (SERVER_ENV or COMMON_ENV: [env] wins). The launch's mode sets
# CONTAINER, CONTAINER_TAG, IMAGE_EXEC, SERVER_ENV and COMMON_ENV (use_mode_software). STEP_ENV: the
# environment alone (the host sampler, which reads the node's /proc, runs outside an exec runtime's image).
# An empty array through ${!ref} is "unbound" under bash 4.4's set -u: ${!ref+"${!ref}"}.
in_image() {
  local ref="$2[@]"
  CT=("${CONTAINER[@]}")
  [[ -n ${CONTAINER_NAME:-} ]] && CT+=("--container-name=$CONTAINER_NAME${CONTAINER_TAG:-}-$1")
  STEP_ENV=("${STEP_LOCALE[@]}" "${CACHE_ENV[@]}" ${!ref+"${!ref}"})
  IN_IMAGE=("${IMAGE_EXEC[@]}" env "${STEP_ENV[@]}")
  return 0
}

step_logs() {
  local rel
  case $1 in
    server-r*)
      # shellcheck disable=SC2059,SC2086  # a generated format; its node rank a glob ('*')
      printf -v rel "$F_SERVER_LOG" "${1#server-r}" '*' && printf '%s\n' "$RUN_DIR"/$rel ;;
    router) printf '%s\n' "$RUN_DIR/$F_ROUTER_LOG" ;;
  esac
}

# Fail at once if any critical step has exited.
alive_or_die() {
  local name rc
  for name in "${!STEP_PIDS[@]}"; do
    if ! kill -0 "${STEP_PIDS[$name]}" 2>/dev/null; then
      wait "${STEP_PIDS[$name]}"
      rc=$?
      unset "STEP_PIDS[$name]"
      mapfile -t files < <(step_logs "$name")
      tail_log "${files[@]}"
      case $name in
        server-r*) fatal step_exited "step=$name" "replica=${name#server-r}" "rc=$rc" "server step of replica ${name#server-r} exited with status $rc" ;;
        *) fatal step_exited "step=$name" "rc=$rc" "$name exited with status $rc" ;;
      esac
    fi
  done
}

# Wait for a background pid while watching the critical steps; returns its exit status.
watch_pid() {
  local pid=$1
  while kill -0 "$pid" 2>/dev/null; do
    alive_or_die
    nap
  done
  wait "$pid"
}

wait_servers_ready() {
  local start=$SECONDS g pending
  local -a ready=()
  while :; do
    pending=()
    for g in "${!HEADS[@]}"; do
      [[ -n "${ready[g]:-}" ]] && continue
      if curl -fsS -m 5 -o /dev/null "http://${ADDRS[g]}:${PORTS[g]}/health" 2>/dev/null; then
        ready[g]=1
        log "replica $g ready after $(( SECONDS - start )) s"
        event ready "replica=$g" "seconds=$(( SECONDS - start ))"
      else
        pending+=("$g")
      fi
    done
    (( ${#pending[@]} == 0 )) && return 0
    alive_or_die
    if (( SECONDS - start >= READY_TIMEOUT )); then
      for g in "${pending[@]}"; do
        tail_log "$(rpath "$F_SERVER_LOG" "$g" 0)"
      done
      fatal not_ready "replicas=$(IFS=,; echo "${pending[*]}")" \
        "replica $(IFS=,; echo "${pending[*]}") not healthy after $READY_TIMEOUT s"
    fi
    nap
  done
}

make_warmup_body() {
  local ids
  ids=$(yes "$WARMUP_TOKEN_ID" | head -n "$WARMUP_INPUT_LEN" | paste -sd, -)
  WARMUP_BODY="$RUN_DIR/$F_WARMUP_REQUEST"
  printf '{"input_ids":[%s],"sampling_params":{"max_new_tokens":%d,"temperature":0,"ignore_eos":true},"stream":false}\n' \
    "$ids" "$WARMUP_OUTPUT_LEN" >"$WARMUP_BODY"
}

# has_role ROLE: some het group of the running launch runs ROLE.
has_role() {
  [[ " ${GROUP_ROLES[*]} " == *" $1 "* ]]
}

# group_name G: how users read het group G of the running launch: "replica 1", "prefill 0".
group_name() {
  printf '%s' "${GROUP_NAMES[$1]:-replica $1}"
}

# One direct request to group G's head (not through the router); it must succeed with every
# input token counted.
warmup_replica() {
  local g=$1 out http code rc
  out=$(rpath "$F_WARMUP_RESPONSE" "$g")
  http=$(rpath "$F_WARMUP_HTTP" "$g")
  log "$(group_name "$g"): warm-up ${WARMUP_INPUT_LEN} -> ${WARMUP_OUTPUT_LEN} tokens"
  event warmup_start "replica=$g"
  curl -sS -m "$WARMUP_TIMEOUT" -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "@$WARMUP_BODY" "http://${ADDRS[g]}:${PORTS[g]}/generate" >"$http" 2>>"$http" &
  watch_pid $!
  rc=$?
  code=$(head -c 3 "$http" 2>/dev/null)
  if (( rc != 0 )) || [[ "$code" != 200 ]] || ! grep -Eq "\"prompt_tokens\": *$WARMUP_INPUT_LEN\b" "$out"; then
    event warmup_done "replica=$g" ok=0 "http=${code:-none}" "curl_rc=$rc"
    alive_or_die
    tail_log "$out" "$(rpath "$F_SERVER_LOG" "$g" 0)"
    fatal warmup_failed "replica=$g" "warm-up of $(group_name "$g") failed (curl status $rc, HTTP ${code:-none})"
  fi
  event warmup_done "replica=$g" ok=1 http=200 "prompt_tokens=$WARMUP_INPUT_LEN"
}

# The warm-up of a launch of servers: one direct request to each.
warmup_replicas() {
  local g
  for g in "${!HEADS[@]}"; do
    warmup_replica "$g"
  done
}

# The correctness gate's canary (docs/metrics.md "Correctness"): CORRECTNESS_PROMPTS fixed prompts
# (prompt k's token j: CORRECTNESS_TOKEN_BASE + (7919 k + 104729 j) mod CORRECTNESS_TOKEN_SPAN, as
# Correctness.prompt_ids) at temperature 0 for CORRECTNESS_OUTPUT_LEN tokens, each sent to every
# server of the launch directly (a launch with prefill/decode roles: through its router), each
# answer kept (F_CORRECTNESS_RESPONSE of target r<G> or router). Never fatal: the collector compares
# the tokens with the reference mode's and makes a wrong, empty or missing answer's launch invalid.
correctness_canary() {
  local k j i ids body code rc pid
  local -a targets=() urls=()
  (( CORRECTNESS_PROMPTS > 0 )) || return 0
  if has_role prefill; then
    targets=(router) urls=("http://$ROUTER_ADDR:$ROUTER_PORT/generate")
  else
    for i in "${!HEADS[@]}"; do targets+=("r$i"); urls+=("http://${ADDRS[i]}:${PORTS[i]}/generate"); done
  fi
  event correctness_start "prompts=$CORRECTNESS_PROMPTS" "targets=$(IFS=,; echo "${targets[*]}")"
  for (( k = 0; k < CORRECTNESS_PROMPTS; k++ )); do
    ids=""
    for (( j = 0; j < CORRECTNESS_INPUT_LEN; j++ )); do
      ids+="${ids:+,}$(( CORRECTNESS_TOKEN_BASE + (7919 * k + 104729 * j) % CORRECTNESS_TOKEN_SPAN ))"
    done
    body=$(rpath "$F_CORRECTNESS_REQUEST" "$k")
    printf '{"input_ids":[%s],"sampling_params":{"max_new_tokens":%d,"temperature":0},"stream":false}\n' \
      "$ids" "$CORRECTNESS_OUTPUT_LEN" >"$body"
    for i in "${!targets[@]}"; do
      curl -sS -m "$CORRECTNESS_TIMEOUT" -o "$(rpath "$F_CORRECTNESS_RESPONSE" "${targets[i]}" "$k")" -w '%{http_code}' \
        -H 'Content-Type: application/json' --data-binary "@$body" "${urls[i]}" \
        >"$(rpath "$F_CORRECTNESS_HTTP" "${targets[i]}" "$k")" 2>&1 &
      pid=$!
      while kill -0 "$pid" 2>/dev/null; do     # one request at a time (no batch shares it), polled
        alive_or_die                           # finely: a short answer is not a poll interval long
        sleep 0.05 & wait $! 2>/dev/null
      done
      wait "$pid"
      rc=$?
      code=$(head -c 3 "$(rpath "$F_CORRECTNESS_HTTP" "${targets[i]}" "$k")" 2>/dev/null)
      event correctness "target=${targets[i]}" "prompt=$k" "http=${code:-none}" "curl_rc=$rc"
    done
  done
  log "correctness canary: $CORRECTNESS_PROMPTS prompt(s) to ${targets[*]}"
}

wait_router_ready() {
  local start=$SECONDS body n
  while :; do
    body=$(curl -fsS -m 5 "http://$ROUTER_ADDR:$ROUTER_PORT$ROUTER_READY_PATH" 2>/dev/null)
    n=$(grep -Eo "\"$ROUTER_READY_FIELD\": *[0-9]+" <<<"$body" | grep -Eo '[0-9]+$')
    if [[ -n "$n" ]] && (( n >= REPLICAS )); then
      log "router ready with $n healthy workers after $(( SECONDS - start )) s"
      event router_ready "workers=$n" "seconds=$(( SECONDS - start ))"
      return 0
    fi
    alive_or_die
    if (( SECONDS - start >= ROUTER_READY_TIMEOUT )); then
      tail_log "$RUN_DIR/$F_ROUTER_LOG"
      fatal router_not_ready "router not ready with $REPLICAS healthy workers after $ROUTER_READY_TIMEOUT s (last: ${body:-no answer})"
    fi
    nap
  done
}

# bench_serving (0.5.23) asks the router for /server_info after the run, for the accept length;
# sglang-router 0.3.x and smg 1.x answer 404 there. Recorded, not an error: the accept length
# comes from the servers' logs.
record_server_info() {
  local code
  code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$ROUTER_ADDR:$ROUTER_PORT/server_info" 2>/dev/null)
  event router_server_info "http=${code:-none}"
  [[ "$code" == 200 ]] || log "router answers HTTP ${code:-none} for /server_info: the client cannot report the accept length through it (not an error)"
}

# srun for the router and client steps, which need no GPU. sbatch exports the job's GPU request
# (SLURM_GPUS_PER_NODE, ...: sbatch(1) OUTPUT ENVIRONMENT VARIABLES) and srun takes those as its
# own options (srun(1) INPUT ENVIRONMENT VARIABLES); srun then asks for "gres:gpu:N,none", and
# the controller honours --gres=none only alone (Slurm 22.05 srun step request, stepmgr
# _copy_job_tres_to_step). Without them, --gres=none really asks for no GPU, which matters where
# --overlap does not share GRES (before 22.05). exec: the caller's $! stays srun's pid.
side_srun() {
  drop_gpu_request
  exec srun "$@"
}

drop_gpu_request() {
  local v
  for v in $(compgen -v SLURM_GPUS) $(compgen -v SLURM_GRES) $(compgen -v SLURM_STEP_GRES); do
    unset "$v"
  done
}

# The address other nodes use for head node $1 (cluster.address).
head_address() {
  local node=$1 addr="" f
  case $ADDRESS_MODE in
    name) addr=$node ;;
    nodeaddr) addr=$(scontrol show node -o "$node" 2>/dev/null | grep -o 'NodeAddr=[^ ]*' | head -n 1) && addr=${addr#NodeAddr=} ;;
    interface) f=$(rpath "$F_PREFLIGHT_ADDRESS" "$node") && [[ -s "$f" ]] && addr=$(<"$f") ;;
  esac
  [[ -n "$addr" ]] || return 1
  printf '%s\n' "$addr"
}

# ---- preflight --------------------------------------------------------------------------------
# JSON string literal of $1 (backslash, quote and control characters escaped).
# shellcheck disable=SC2317  # runs on the nodes, through check.sh
json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/}
  s=${s//$'\n'/\\n}
  s=$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')
  printf '"%s"' "$s"
}

# Runs on each node (inside the container): the preflight script G PORT... -> the node's report
# (F_PREFLIGHT_REPORT), its problems (F_PREFLIGHT_PROBLEMS: one "CHECK<TAB>CAUSE" line per
# problem) and, with an interface address, the address (F_PREFLIGHT_ADDRESS).
# shellcheck disable=SC2317  # runs on the nodes, through check.sh
preflight_node() {
  local g=$1; shift
  local node=${SLURMD_NODENAME:-${HOSTNAME:-unknown}} rank=${SLURM_NODEID:-0} start=$SECONDS
  local out rc line mod ver what path i n=0 name driver="" addr="" taken report partial found
  local -a problems=() checks=() mods=("${PF_MODULES[@]}") cmods=() names=() jmods=()
  local router_node=0 tok_pid="" tok_out
  # a mode's own image or environment: its reports are "<node>@<mode>"'s (PF_TAG)
  tok_out=$(rpath "$F_PREFLIGHT_TOKENIZER" "$node${PF_TAG:-}")
  report=$(rpath "$F_PREFLIGHT_REPORT" "$node${PF_TAG:-}")
  partial=$(rpath "$F_PREFLIGHT_PARTIAL" "$node${PF_TAG:-}")
  found=$(rpath "$F_PREFLIGHT_PROBLEMS" "$node${PF_TAG:-}")
  [[ "$g" == 0 && "$rank" == 0 ]] && router_node=1
  problem() { checks+=("$1"); problems+=("$2"); }
  # import_modules CMD_ARRAY MODULE[=DIST]...: CMD prints "MODULE VERSION" or "MODULE ERROR ..."
  import_modules() {
    local ref="$1[@]"; shift
    local -a imp=(${!ref+"${!ref}"})
    (( ${#imp[@]} && $# )) || return 0
    out=$("${imp[@]}" "$@" 2>&1); rc=$?
    while IFS= read -r line; do
      mod=${line%% *}; ver=${line#* }
      for i in "$@"; do
        [[ "${i%%=*}" == "$mod" ]] || continue
        if [[ "$ver" == ERROR* ]]; then
          problem import "module $mod is not importable: ${ver#ERROR }"
        else
          jmods+=("$(json_str "$mod"): $(json_str "$ver")")
        fi
      done
    done <<<"$out"
    if (( rc != 0 )) && ! grep -q ' ERROR ' <<<"$out"; then
      problem import "import check failed (status $rc): $(head -n 1 <<<"$out")"
    fi
  }
  # the client's tokenizer, loaded as the client will load it (in the background: it overlaps the
  # other checks); before anything, the cache directory every step writes to
  if [[ -n "${CACHE_DIR:-}" ]]; then
    out=$( { mkdir -p -- "$CACHE_DIR" && : >"$CACHE_DIR/.slurm-ab-write-test.$node" \
             && rm -f -- "$CACHE_DIR/.slurm-ab-write-test.$node"; } 2>&1 ) \
      || problem cache "cache directory $CACHE_DIR is not writable: $(tail -n 1 <<<"$out")"
  fi
  if (( router_node && ${#PF_TOKENIZER[@]} )) && [[ -n "${PF_TOKENIZER_PATH:-}" ]]; then
    "${PF_TOKENIZER[@]}" "$PF_TOKENIZER_PATH" >"$tok_out" 2>&1 &
    tok_pid=$!
  fi
  # the client's modules, on ROUTER_HOST, by the client's own Python when it has another
  # (PF_CLIENT_IMPORT), else in the one import with the others
  (( router_node )) && for i in "${PF_CLIENT_MODULES[@]}"; do
    if (( ${#PF_CLIENT_IMPORT[@]} )); then cmods+=("$i")
    elif [[ " ${mods[*]} " != *" $i "* ]]; then mods+=("$i"); fi
  done
  import_modules PF_IMPORT "${mods[@]}"
  import_modules PF_CLIENT_IMPORT "${cmods[@]}"
  # GPUs: one "NAME, DRIVER" line per visible GPU
  if (( ${#PF_GPU[@]} )); then
    out=$("${PF_GPU[@]}" 2>&1); rc=$?
    if (( rc != 0 )); then
      problem gpus "GPU query failed (status $rc): $(head -n 1 <<<"$out")"
    else
      while IFS= read -r line; do
        [[ -n "${line// /}" ]] || continue
        n=$(( n + 1 ))
        name=${line%%,*}; names+=("$(json_str "${name## }")")
        [[ "$line" == *,* ]] && driver=${line##*,} && driver=${driver## }
      done <<<"$out"
      (( n == PF_GPUS )) || problem gpus "$n GPUs visible, the mode needs $PF_GPUS per node"
    fi
  fi
  # paths the servers read (every node) and the client reads (the router's node)
  local -a paths=("${PF_PATHS[@]}")
  (( router_node )) && paths+=("${PF_CLIENT_PATHS[@]}")
  for (( i = 0; i + 1 < ${#paths[@]}; i += 2 )); do
    what=${paths[i]}; path=${paths[i+1]}
    [[ -e "$path" ]] || problem path "$what path $path is missing"
  done
  # ports this job will listen on: only head nodes (node rank 0) listen
  if (( rank == 0 && $# && ${#PF_PORT[@]} )); then
    taken=$("${PF_PORT[@]}" "$@" 2>&1); rc=$?
    if (( rc != 0 )); then
      problem port "port check failed (status $rc): $(head -n 1 <<<"$taken")"
    else
      while IFS= read -r line; do
        [[ -n "$line" ]] && problem port "port ${line%% *} is already in use (${line#* })"
      done <<<"$taken"
    fi
  fi
  # the address of a named interface (cluster.address = "interface")
  if [[ -n "$PF_IFACE" ]]; then
    addr=$("${PF_ADDRESS[@]}" "$PF_IFACE" 2>&1)
    if [[ "$addr" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
      printf '%s\n' "$addr" >"$(rpath "$F_PREFLIGHT_ADDRESS" "$node")"
    else
      problem address "no IPv4 address on interface $PF_IFACE: $(head -n 1 <<<"$addr")"
      addr=""
    fi
  fi
  preflight_fabric
  if declare -F preflight_pd >/dev/null; then preflight_pd; fi     # a job with prefill/decode roles (pd.sh)
  if [[ -n "$tok_pid" ]]; then
    wait "$tok_pid"; rc=$?
    if (( rc != 0 )); then
      line=$(grep -v '^[[:space:]]*$' "$tok_out" | tail -n 1)
      problem tokenizer "tokenizer $PF_TOKENIZER_PATH does not load (status $rc): $line"
    fi
  fi
  : >"$found"
  local jprob=""
  for i in "${!problems[@]}"; do
    printf '%s\t%s\n' "${checks[i]}" "${problems[i]//$'\n'/ }" >>"$found"
    jprob+="${jprob:+, }{\"check\": $(json_str "${checks[i]}"), \"cause\": $(json_str "${problems[i]}")}"
  done
  {
    printf '{"node": %s, "replica": %d, "node_rank": %d, "host": %s, "ok": %s,\n' \
      "$(json_str "$node")" "$g" "$rank" "$(json_str "${HOSTNAME:-}")" "$([[ ${#problems[@]} == 0 ]] && echo true || echo false)"
    printf ' "modules": {%s},\n' "$(IFS=,; echo "${jmods[*]}")"
    printf ' "gpu_count": %s, "gpus": [%s], "driver": %s, "address": %s,\n' \
      "$( (( ${#PF_GPU[@]} )) && echo "$n" || echo null)" "$(IFS=,; echo "${names[*]}")" "$(json_str "$driver")" "$(json_str "$addr")"
    printf ' "problems": [%s], "seconds": %d}\n' "$jprob" "$(( SECONDS - start ))"
  } >"$partial" && mv -f "$partial" "$report"
}

# The fabric as NCCL and Gloo will see it on this node, inside the container: the interfaces of
# NCCL_SOCKET_IFNAME (a list of prefixes; "=" exact names, "^" names to leave out) and
# GLOO_SOCKET_IFNAME (exact names), the RDMA devices of NCCL_IB_HCA (NAME[:PORT] prefixes, "="
# and "^" as above) with an ACTIVE port: NCCL uses only those (ncclIbInit, src/transport/net_ib*),
# and without one it falls back to sockets. Runs inside preflight_node (its problem()).
# shellcheck disable=SC2317,SC2153  # runs on the nodes, through check.sh (which sets PF_*)
preflight_fabric() {
  local out rc spec var entry dev port state rest ok any name
  local -a ifaces=() ports=() entries=()
  if (( ${#PF_IFACES[@]} )); then
    out=$("${PF_IFACES[@]}" 2>&1); rc=$?
    if (( rc != 0 )); then
      problem fabric "interface listing failed (status $rc): $(head -n 1 <<<"$out")"
    else
      mapfile -t ifaces < <(grep -v '^[[:space:]]*$' <<<"$out")
      for var in NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME; do
        spec=${!var:-}
        [[ -n "$spec" ]] || continue
        if [[ $var == GLOO_SOCKET_IFNAME ]]; then
          IFS=, read -ra entries <<<"$spec"
          for entry in "${entries[@]}"; do
            [[ " ${ifaces[*]} " == *" $entry "* ]] || \
              problem fabric "$var=$spec: interface $entry does not exist here (interfaces: $(IFS=,; echo "${ifaces[*]}"))"
          done
        elif ! iface_matches "$spec" "${ifaces[@]}"; then
          problem fabric "$var=$spec matches no interface here (interfaces: $(IFS=,; echo "${ifaces[*]}"))"
        fi
      done
    fi
  fi
  (( ${#PF_HCA[@]} )) || return 0
  out=$("${PF_HCA[@]}" 2>&1); rc=$?
  if (( rc != 0 )); then
    problem fabric "RDMA device listing failed (status $rc): $(head -n 1 <<<"$out")"
    return 0
  fi
  mapfile -t ports < <(grep -v '^[[:space:]]*$' <<<"$out")     # "DEVICE PORT STATE"
  spec=${NCCL_IB_HCA:-}
  if [[ -n "$spec" && $spec != ^* ]]; then
    IFS=, read -ra entries <<<"${spec#=}"
    for entry in "${entries[@]}"; do
      name=${entry%%:*}; ok=0; any=0
      for line in "${ports[@]}"; do
        read -r dev port rest <<<"$line"
        if [[ $spec == =* ]]; then [[ $dev == "$name" ]] || continue; else [[ $dev == "$name"* ]] || continue; fi
        [[ $entry == *:* && $port != "${entry#*:}" ]] && continue
        any=1; state=$rest
        [[ $rest == *ACTIVE* ]] && ok=1
      done
      if (( ! any )); then
        problem fabric "NCCL_IB_HCA=$spec: no RDMA device $entry here (devices: $(for line in "${ports[@]}"; do printf '%s ' "${line%% *}"; done | tr ' ' '\n' | sort -u | paste -sd, -))"
      elif (( ! ok )); then
        problem fabric "NCCL_IB_HCA=$spec: $entry has no ACTIVE port (state $state): NCCL would fall back to sockets"
      fi
    done
  elif [[ ${PF_NCCL_NETWORK:-} == IB ]]; then
    ok=0
    for line in "${ports[@]}"; do
      read -r dev port rest <<<"$line"
      [[ $spec == ^* ]] && iface_matches "${spec#^}" "$dev" && continue
      [[ $rest == *ACTIVE* ]] && ok=1
    done
    (( ok )) || problem fabric "no ACTIVE RDMA port here${spec:+ outside NCCL_IB_HCA=$spec}, and cluster.nccl_network is IB"
  fi
}

# iface_matches SPEC NAME...: some NAME is selected by an NCCL interface list (prefixes; "=" exact;
# "^" for a list of names to leave out), as ncclFindInterfaces / matchIfList do.
# shellcheck disable=SC2317  # runs on the nodes, through check.sh
iface_matches() {
  local spec=$1 name entry exclude=0 exact=0 hit
  local -a entries=()
  shift
  [[ $spec == ^* ]] && exclude=1 && spec=${spec#^}
  [[ $spec == =* ]] && exact=1 && spec=${spec#=}
  IFS=, read -ra entries <<<"$spec"
  for name in "$@"; do
    hit=0
    for entry in "${entries[@]}"; do
      entry=${entry%%:*}
      if (( exact )); then [[ $name == "$entry" ]] && hit=1; else [[ $name == "$entry"* ]] && hit=1; fi
    done
    if (( exclude )); then (( hit )) || [[ $name == lo ]] || return 0; else (( hit )) && return 0; fi
  done
  return 1
}

# The node-side script of the preflight (a mode's own image: its own script, PF_TAG).
# shellcheck disable=SC2317  # not called when preflight.enabled = false
preflight_script() {
  if [[ -n "${PF_TAG:-}" ]]; then rpath "$F_PREFLIGHT_MODE_SCRIPT" "${PF_TAG#@}"; else printf '%s' "$RUN_DIR/$F_PREFLIGHT_SCRIPT"; fi
}

# The node-side script: the preflight's settings and functions, run by each preflight task.
# shellcheck disable=SC2317  # not called when preflight.enabled = false
write_preflight_script() {
  mkdir -p "$RUN_DIR/$F_PREFLIGHT" || fatal preflight "cannot create $RUN_DIR/$F_PREFLIGHT"
  {
    echo '#!/bin/bash'
    echo '# slurm-ab preflight, run on every node by the job'"'"'s first steps (written by the job script).'
    declare -p RUN_DIR PF_MODULES PF_CLIENT_MODULES PF_IMPORT PF_GPU PF_GPUS PF_PORT PF_ADDRESS PF_IFACE PF_PATHS PF_CLIENT_PATHS \
      F_PREFLIGHT_REPORT F_PREFLIGHT_PARTIAL F_PREFLIGHT_PROBLEMS F_PREFLIGHT_ADDRESS F_PREFLIGHT_TOKENIZER
    # the fabric, the cache directory and the tokenizer (jobs rendered before these had none)
    declare -p PF_IFACES PF_HCA PF_NCCL_NETWORK PF_TOKENIZER PF_TOKENIZER_PATH CACHE_DIR PF_PD_IB \
      PF_CLIENT_IMPORT PF_PD_GPUDIRECT PF_PD_IFACE F_PREFLIGHT_HOST_IP PF_TAG 2>/dev/null
    declare -f rpath json_str preflight_node preflight_fabric iface_matches
    if declare -F preflight_pd >/dev/null; then declare -f preflight_pd; fi
    echo 'preflight_node "$@"'
  } >"$(preflight_script)"
}

# Wait for every preflight step, then fail the job on the first problem (component, node rank
# order), naming node and cause; all problems are logged.
# shellcheck disable=SC2317  # not called when preflight.enabled = false
wait_preflight() {
  local start=$SECONDS pid running g r node f check cause first="" nodes=0 rel
  while :; do
    running=0
    for pid in "${PF_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    (( running )) || break
    if (( SECONDS - start >= PREFLIGHT_TIMEOUT )); then
      # shellcheck disable=SC2059,SC2086  # a generated format; replica and node rank globs ('*')
      printf -v rel "$F_PREFLIGHT_LOG" '*' '*' && tail_log "$RUN_DIR"/$rel
      fatal preflight check=timeout "preflight did not finish within $PREFLIGHT_TIMEOUT s (container start, hung file system?)"
    fi
    sleep 0.2 & wait $! 2>/dev/null
  done
  for pid in "${PF_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  for g in "${!HEADS[@]}"; do
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    for r in "${!nodes_ref[@]}"; do
      node=${nodes_ref[r]}
      nodes=$(( nodes + 1 ))
      f=$(rpath "$F_PREFLIGHT_PROBLEMS" "$node${PF_TAG:-}")
      if [[ ! -s "$(rpath "$F_PREFLIGHT_REPORT" "$node${PF_TAG:-}")" ]]; then
        tail_log "$(rpath "$F_PREFLIGHT_LOG" "$g" "$r")"
        # shellcheck disable=SC2059  # a generated format (rundir.Layout)
        cause="no preflight report from $node (the step failed there: see $(printf "$F_PREFLIGHT_LOG" "$g" "$r"))"
        log "preflight: $node (replica $g node rank $r): $cause" >&2
        [[ -n "$first" ]] || first="$g|$r|$node|report|$cause"
        continue
      fi
      while IFS=$'\t' read -r check cause; do
        [[ -n "$check" ]] || continue
        log "preflight: $node (replica $g node rank $r): $cause" >&2
        [[ -n "$first" ]] || first="$g|$r|$node|$check|$cause"
      done <"$f"
    done
  done
  if [[ -n "$first" ]]; then
    IFS='|' read -r g r node check cause <<<"$first"
    fatal preflight "node=$node" "replica=$g" "node_rank=$r" "check=$check" "cause=$cause" \
      ${PF_TAG:+"mode=${PF_TAG#@}"} "preflight${PF_TAG:+ in the image of mode ${PF_TAG#@}}: $node (replica $g node rank $r): $cause"
  fi
  log "preflight${PF_TAG:+ in the image of mode ${PF_TAG#@}} passed on $nodes nodes after $(( SECONDS - start )) s"
  event preflight_done "nodes=$nodes" "seconds=$(( SECONDS - start ))" ${PF_TAG:+"mode=${PF_TAG#@}"}
}

# ---- /metrics scrapes: every node of every replica and the router, over the benchmark window ---
# Raw text goes to F_SCRAPE (metrics/<target>-<stamp>.prom; never modified), one "metrics_scrape
# target=.. phase=start|during|end round=.. ok=1|0" event per scrape. A failed scrape keeps its
# evidence (F_SCRAPE_ERROR: HTTP body and curl's message) and is never fatal.
# Targets: r<G>n<R> = replica G's node rank R, on the server port. Node rank 0 serves the HTTP API
# (tokenizer-side counters and histograms) and the gauges of its own schedulers; SGLang's non-zero
# node ranks serve their own schedulers' metrics from the dummy health server on the same port
# (launch_dummy_health_check_server(host, port, enable_metrics), sglang/srt/utils/common.py), so
# with PP the later stages' gauges, with DP attention the other DP ranks', are read there.
METRICS_LOOP_PID=""
declare -A METRICS_URLS=()   # target -> URL, resolved at each pass's start (metrics_targets)
declare -A METRICS_NODES=()  # target -> node name

# Fill METRICS_URLS/METRICS_NODES: each replica node's address (the head's is ADDRS[g]; the others'
# by cluster.address, else the node name), then the router.
metrics_targets() {
  local g r node addr
  (( ${#METRICS_URLS[@]} )) && return 0
  if (( METRICS_SERVERS )); then
    for g in "${!HEADS[@]}"; do
      local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
      for r in "${!nodes_ref[@]}"; do
        node=${nodes_ref[r]}
        if (( r == 0 )); then
          addr=${ADDRS[g]:-${HEADS[g]}}
        else
          addr=$(head_address "$node") || addr=$node
        fi
        METRICS_URLS["r${g}n$r"]="http://$addr:${PORTS[g]}/metrics"
        METRICS_NODES["r${g}n$r"]=$node
      done
    done
  fi
  METRICS_URLS[router]="http://${ROUTER_ADDR:-$ROUTER_HOST}:$ROUTER_METRICS_PORT/metrics"
  METRICS_NODES[router]=$ROUTER_HOST
}

# scrape_one TARGET URL PHASE ROUND [NODE]
scrape_one() {
  local target=$1 url=$2 phase=$3 round=$4 node=${5:-} stamp prom err part msg code rc
  stamp=$(date '+%Y%m%d-%H%M%S.%3N')
  # shellcheck disable=SC2059  # generated formats (rundir.Layout); relative: the event names them so
  printf -v prom "$F_SCRAPE" "$target" "$stamp"
  # shellcheck disable=SC2059
  printf -v err "$F_SCRAPE_ERROR" "$target" "$stamp"
  part=$(rpath "$F_SCRAPE_PARTIAL" "$target" "$stamp")
  msg=$(rpath "$F_SCRAPE_CURL" "$target" "$stamp")
  code=$(curl -sS -m "$METRICS_TIMEOUT" -o "$part" -w '%{http_code}' "$url" 2>"$msg")
  rc=$?
  if (( rc == 0 )) && [[ "$code" == 200 ]]; then
    mv -f -- "$part" "$RUN_DIR/$prom"
    rm -f -- "$msg"
    event metrics_scrape "target=$target" "phase=$phase" "round=$round" "node=$node" ok=1 http=200 "file=$prom"
  else
    cat -- "$msg" >>"$part" 2>/dev/null
    mv -f -- "$part" "$RUN_DIR/$err" 2>/dev/null
    rm -f -- "$msg"
    event metrics_scrape "target=$target" "phase=$phase" "round=$round" "node=$node" ok=0 "http=${code:-000}" "curl_rc=$rc" "file=$err"
  fi
}

# scrape_metrics start|during|end [ROUND]: every target at once; at "end", after the loop stopped.
scrape_metrics() {
  local phase=$1 round=${2:-$1} target
  local -a pids=()
  if [[ "$phase" == end && -n "$METRICS_LOOP_PID" ]]; then
    wait "$METRICS_LOOP_PID" 2>/dev/null
    METRICS_LOOP_PID=""
  fi
  mkdir -p "$RUN_DIR/$F_METRICS" || return 0
  [[ "$phase" == start ]] && METRICS_URLS=()   # per pass: a launch may change METRICS_SERVERS
  metrics_targets
  for target in "${!METRICS_URLS[@]}"; do
    scrape_one "$target" "${METRICS_URLS[$target]}" "$phase" "$round" "${METRICS_NODES[$target]:-}" &
    pids+=($!)
  done
  wait "${pids[@]}" 2>/dev/null
  return 0
}

# scrape_metrics_during PID: every METRICS_INTERVAL s while PID (the client) runs, in the background.
scrape_metrics_during() {
  local pid=$1
  (
    n=0
    next=$(( SECONDS + METRICS_INTERVAL ))
    while kill -0 "$pid" 2>/dev/null; do
      if (( SECONDS >= next )); then
        n=$(( n + 1 ))
        scrape_metrics during "$n"
        next=$(( SECONDS + METRICS_INTERVAL ))
      fi
      sleep 1 &
      wait $! 2>/dev/null
    done
  ) &
  METRICS_LOOP_PID=$!
}

# Slurm's view of the job's nodes as it ends: a node that is down, drained, failing or not
# responding explains a NODE_FAIL, so it goes to events.log ("node_state node=... state=...
# reason=...") and the job's output.
# shellcheck disable=SC2317  # runs from a trap
record_node_states() {
  local var nodes="" node state reason
  local -A seen=()
  for var in $(compgen -v SLURM_JOB_NODELIST_HET_GROUP_); do nodes+="${nodes:+,}${!var}"; done
  [[ -n "$nodes" ]] || nodes=${SLURM_JOB_NODELIST:-}
  [[ -n "$nodes" ]] || return 0
  while IFS='|' read -r node state reason; do
    [[ -n "$node" && -z "${seen[$node]:-}" ]] || continue
    seen[$node]=1
    case $state in
      *'*' | down* | drain* | fail* | unk* | inval* | reboot* | power* | maint*)
        log "node $node is $state in Slurm (reason: ${reason:-none})" >&2
        event node_state "node=$node" "state=$state" "reason=${reason//$'\n'/ }" ;;
    esac
  done < <(timeout 10 sinfo -h -N -n "$nodes" -o '%N|%T|%E' 2>/dev/null)
}

# The job's steps still known to Slurm, batch and extern left out. A het job's component G has a
# job id of its own (SLURM_JOB_ID_HET_GROUP_<G>) and squeue lists its steps under that id only
# ("<component id>.<step>", e.g. 6.8 for component 1 of job 5+1).
# shellcheck disable=SC2317  # runs from a trap
job_steps() {
  local var ids=""
  for var in $(compgen -v SLURM_JOB_ID_HET_GROUP_); do ids+="${ids:+,}${!var}"; done
  timeout 10 squeue -h -s -j "${ids:-$SLURM_JOB_ID}" -o %i 2>/dev/null | grep -Ev '\.(batch|extern|interactive)$'
  return 0
}

# signal_steps SIG: SIG to the tasks of every step still running, through Slurm: scancel(1)
# --signal "is sent directly to the slurmd where the job is running" (its example: scancel
# --signal=TERM 1234.1 1234.3). Recorded as "steps_signal signal=SIG steps=...".
# shellcheck disable=SC2317  # runs from a trap
signal_steps() {
  local sig=$1
  local -a steps=()
  mapfile -t steps < <(job_steps)
  (( ${#steps[@]} )) || return 0
  event steps_signal "signal=$sig" "steps=$(IFS=,; echo "${steps[*]}")"
  timeout 10 scancel --signal="$sig" "${steps[@]}" 2>/dev/null
  return 0
}

# Stop every step: SIGTERM to its tasks through Slurm, then SIGKILL to what still runs after the
# grace period (cluster.teardown_grace_s). Never SIGTERM to an srun: srun answers SIGTERM with
# SIGKILL to its tasks ("forcing job termination": _srun_signal_mgr in src/srun/libsrun/srun_job.c
# of Slurm 22.05.8, src/srun/srun_job.c of 24.11.6), which would leave SGLang no grace at all. A
# campaign launch (a subshell of this script) gets SIGTERM itself and tears its own steps down.
# Runs once, on every exit path.
# shellcheck disable=SC2317  # runs from a trap
teardown() {
  local reason=$1 pid deadline alive
  (( TORN_DOWN )) && return 0
  TORN_DOWN=1
  event teardown "reason=$reason"
  # GPU samplers on a node that no longer answers Slurm end on this file (telemetry.sh)
  if (( ${#SAMPLER_PIDS[@]} )); then : 2>/dev/null >"$RUN_DIR/$F_SAMPLERS_STOP"; fi
  local -a pids=()
  [[ -n "${CLIENT_PID:-}" ]] && pids+=("$CLIENT_PID")
  for pid in "${STEP_PIDS[@]}" "${SAMPLER_PIDS[@]}"; do pids+=("$pid"); done
  for pid in "${PF_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && pids+=("$pid"); done   # a preflight running
  # Nothing of this shell runs any more (a launch tore its own steps down): steps Slurm still lists
  # are completing; give them 3 s (a deadline, not a count of squeue calls that may each take 10 s
  # while slurmctld waits for a node that stopped answering) before signalling them again.
  deadline=$(( $(now_ms) + 3000 ))
  while (( ${#pids[@]} == 0 && $(now_ms) < deadline )) && [[ -n "$(job_steps)" ]]; do
    sleep 0.3
  done
  if (( ${#pids[@]} == 0 )); then
    # What Slurm still lists had its SIGTERM, grace and SIGKILL from the launch's own teardown
    # (a step on a node that stopped answering never ends): SIGKILL again, no second grace.
    signal_steps KILL
    record_node_states
    log "teardown ($reason) done"
    return 0
  fi
  signal_steps TERM
  for pid in "${pids[@]}"; do
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == srun ]] || kill -TERM "$pid" 2>/dev/null
  done
  deadline=$(( $(now_ms) + GRACE * 1000 ))    # milliseconds: the whole grace, not less
  while (( $(now_ms) < deadline )); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    if (( alive )); then
      sleep 0.2
    elif [[ -n "$(job_steps)" ]]; then
      sleep 0.5             # srun has gone; Slurm still completes the step
    else
      break
    fi
  done
  signal_steps KILL
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  record_node_states
  log "teardown ($reason) done"
}

# shellcheck disable=SC2317  # runs from a trap
on_exit() {
  local rc=$?
  trap '' TERM INT USR1        # the clean-up of the nodes runs to its end
  teardown exit
  cleanup_nodes
  event job_end "rc=$rc"
  if (( CANCELLED )); then
    # slurm-ab cancel asked for this end: everything is down and the nodes are clean; the job's
    # state says what happened (CANCELLED by the user, in sacct) rather than a failed script
    trap - EXIT
    timeout 10 scancel "$SLURM_JOB_ID" 2>/dev/null
  fi
  exit "$rc"
}
# shellcheck disable=SC2317  # runs from a trap
on_signal() {
  log "FATAL: received SIG$1 (scancel, node failure, preemption or time limit): stopping" >&2
  event fail kind=signal "signal=$1"
  teardown "signal-$1"
  exit 143
}
# USR1: Slurm's warning before the time limit (--signal=B:USR1@...), or `slurm-ab cancel`, which
# writes the run's cancel request first and signals the batch script alone (scancel -b -s USR1):
# the same teardown, then the clean-up of the nodes while the job still runs (Slurm refuses new
# steps once it has cancelled a job).
# shellcheck disable=SC2317  # runs from a trap
on_time_limit() {
  if [[ -e "$RUN_DIR/$F_CANCEL_REQUEST" ]]; then
    CANCELLED=1
    log "FATAL: slurm-ab cancel: tearing down, then cleaning the nodes" >&2
    event fail kind=cancelled "request=$(head -n 1 "$RUN_DIR/$F_CANCEL_REQUEST" 2>/dev/null)"
    teardown cancel
    exit 130
  fi
  log "FATAL: time limit is near: stopping before Slurm kills the job" >&2
  event fail kind=time_limit
  teardown time-limit
  exit 124
}
trap on_exit EXIT
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap on_time_limit USR1
{% endraw %}
