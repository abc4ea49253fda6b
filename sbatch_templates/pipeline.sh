{% raw %}
# ---- the job's flow (static: slurm-ab's pipeline.sh; the generated part above holds the values) --
# One flow for every job (a run of one mode is the campaign of one launch and one pass): each
# launch runs in a subshell of its own, in its own directory (LAUNCH_DIRS): servers of its mode on
# every node, readiness, direct warm-ups, router, its passes, then a complete teardown. A failed
# launch ends only itself (launch_end status=failed) and the job goes on with the next; the job
# fails (the status of its last failed launch) only when no launch succeeded: a job of one launch
# ends with that launch's status. Every file name comes from the generated F_* formats
# (rundir.Layout).

# Each prefill instance's bootstrap port (a job with prefill/decode roles sets BOOTSTRAP_PORT_BASE);
# the role and the name of each het group of the running launch (run_launch: MODE_ROLES_<i>,
# MODE_NAMES_<i>).
BOOTSTRAP_PORT_BASE=${BOOTSTRAP_PORT_BASE:-0}
BOOT_PORTS=()
GROUP_ROLES=()
GROUP_NAMES=()

# Run directory: never reuse one that a job already wrote to.
prepare_run_dir() {
  local moved
  if [[ -e "$RUN_DIR/$F_EVENTS" ]]; then
    # shellcheck disable=SC2059  # F_RESUBMITTED: a generated format (rundir.Layout), not data
    printf -v moved "$F_RESUBMITTED" "$RUN_DIR" "$SLURM_JOB_ID"
    echo "slurm-ab: $RUN_DIR was already used by another job; this job writes to $moved" >&2
    RUN_DIR=$moved
    # The rest of this job's output goes with its own evidence, not into the earlier run.
    mkdir -p "$RUN_DIR/$F_LOGS" && exec >>"$(rpath "$F_SLURM_OUT" "$SLURM_JOB_ID")" 2>&1
  fi
  mkdir -p "$RUN_DIR/$F_LOGS" || { echo "slurm-ab: FATAL: cannot create $RUN_DIR/$F_LOGS" >&2; exit 1; }
  [[ -e "$RUN_DIR/$F_JOB_SCRIPT" ]] || cp -- "$0" "$RUN_DIR/$F_JOB_SCRIPT" 2>/dev/null || true
}

check_secrets() {
  local name
  for name in "${SECRET_ENV[@]}"; do
    [[ -n "${!name:-}" ]] || fatal missing_secret "secret variable $name is not set in the submitting environment"
  done
}

# Hosts and ports of every component (replica G = het group G). Ports depend on the replica and
# on the job id, so neither two replicas on one host nor two jobs sharing nodes collide.
read_hosts() {
  local g var slot=$(( SLURM_JOB_ID % JOB_SLOTS ))
  HEADS=() PORTS=() DIST_PORTS=()
  for (( g = 0; g < REPLICAS; g++ )); do
    var="SLURM_JOB_NODELIST_HET_GROUP_$g"
    mapfile -t "R${g}_NODES" < <(scontrol show hostnames "${!var}")
    local -n nodes_ref="R${g}_NODES"
    HEADS[g]=${nodes_ref[0]}
    unset -n nodes_ref
    PORTS[g]=$(( SERVER_PORT_BASE + slot * JOB_SLOT_SIZE + g * REPLICA_STRIDE ))
    DIST_PORTS[g]=$(( DIST_PORT_BASE + slot * JOB_SLOT_SIZE + g * REPLICA_STRIDE ))
    (( BOOTSTRAP_PORT_BASE )) && BOOT_PORTS[g]=$(( BOOTSTRAP_PORT_BASE + slot * JOB_SLOT_SIZE + g * REPLICA_STRIDE ))
  done
  ROUTER_HOST=${HEADS[0]}   # the node name; the router and the client steps are pinned to it
  ROUTER_PORT=$(( ROUTER_PORT_BASE + slot ))
  ROUTER_METRICS_PORT=$(( ROUTER_METRICS_PORT_BASE + slot ))
}

# events.log lines of the hosts and ports (the job's own; again in each launch's events.log)
record_hosts() {
  local g
  for g in "${!HEADS[@]}"; do
    local -n nodes_ref="R${g}_NODES"
    event hosts "replica=$g" "head=${HEADS[g]}" "nodes=$(IFS=,; echo "${nodes_ref[*]}")" "port=${PORTS[g]}" "dist_port=${DIST_PORTS[g]}" \
      ${BOOT_PORTS[g]:+"bootstrap_port=${BOOT_PORTS[g]}"}
    unset -n nodes_ref
  done
  event ports "router=$ROUTER_PORT" "router_metrics=$ROUTER_METRICS_PORT"
}

# The preflight: one short step per component, on every node, in the servers' container. It fails
# the job within seconds, naming node and cause, before any model loads; each node writes what it
# found to its preflight report (F_PREFLIGHT_REPORT).
run_preflight() {
  local g
  local -a extra
  write_preflight_script
  event preflight_start
  for g in "${!HEADS[@]}"; do
    extra=()
    (( g == 0 )) && extra=("$ROUTER_PORT" "$ROUTER_METRICS_PORT")
    [[ -n "${BOOT_PORTS[g]:-}" ]] && extra+=("${BOOT_PORTS[g]}")
    local -n nodes_ref="R${g}_NODES"
    srun --het-group="$g" --nodes="${#nodes_ref[@]}" --ntasks-per-node=1 \
      --output="$(rpath "$F_PREFLIGHT_LOG" "$g" %t)" "${CONTAINER[@]}" "${SRUN_EXTRA[@]}" \
      env "${SERVER_ENV[@]}" bash "$RUN_DIR/$F_PREFLIGHT_SCRIPT" "$g" "${PORTS[g]}" "${DIST_PORTS[g]}" "${extra[@]}" &
    unset -n nodes_ref
    PF_PIDS+=($!)
  done
  wait_preflight
}

# The address other nodes use for each head (cluster.address).
resolve_addresses() {
  local g
  local -a kv=()
  ADDRS=()
  for g in "${!HEADS[@]}"; do
    ADDRS[g]=$(head_address "${HEADS[g]}") || fatal address "node=${HEADS[g]}" "no $ADDRESS_MODE address for ${HEADS[g]}"
    printf -v "R${g}_ADDR" '%s' "${ADDRS[g]}"
    printf -v "R${g}_PORT" '%s' "${PORTS[g]}"
    printf -v "R${g}_BOOT" '%s' "${BOOT_PORTS[g]:-}"
    kv+=("replica$g=${ADDRS[g]}")
  done
  ROUTER_ADDR=${ADDRS[0]}
  event addresses "mode=$ADDRESS_MODE" "${kv[@]}"
}

# One srun step per het group, one task per node, with the command of the group's role in the
# launch's mode (SERVER_CMD_<mode>_<role>; a prefill adds its bootstrap port).
start_servers() {
  local g
  local -a cmd
  for g in "${!HEADS[@]}"; do
    local -n nodes_ref="R${g}_NODES"
    local -n role_cmd="SERVER_CMD_${MODE_INDEX}_${GROUP_ROLES[g]}"
    cmd=("${role_cmd[@]}")
    unset -n role_cmd
    [[ ${GROUP_ROLES[g]} == prefill ]] && cmd+=(--disaggregation-bootstrap-port "${BOOT_PORTS[g]}")
    if declare -F nsys_wrap >/dev/null; then nsys_wrap "$g"; fi       # profile.nsys (profile.sh)
    log "launch $LAUNCH ($MODE), $(group_name "$g"): starting SGLang on ${nodes_ref[*]} (head ${HEADS[g]}:${PORTS[g]})"
    event server_launch "replica=$g" "role=${GROUP_ROLES[g]}"
    # shellcheck disable=SC2016  # $SLURM_NODEID must expand on each node, not here
    srun --het-group="$g" --nodes="${#nodes_ref[@]}" --ntasks-per-node=1 --kill-on-bad-exit=1 "${SERVER_STEP[@]}" \
      --output="$(rpath "$F_SERVER_LOG" "$g" %t)" "${CONTAINER[@]}" "${SRUN_EXTRA[@]}" \
      bash -c 'exec env "$@" --node-rank "$SLURM_NODEID"' "server-r$g" "${SERVER_ENV[@]}" "${cmd[@]}" \
      --dist-init-addr "${ADDRS[g]}:${DIST_PORTS[g]}" --port "${PORTS[g]}" &
    STEP_PIDS[server-r$g]=$!
    unset -n nodes_ref
  done
}

start_router() {
  router_command
  log "router: ${ROUTER_CMD[*]}"
  event router_launch "port=$ROUTER_PORT" "host=$ROUTER_HOST" "profile=$ROUTER_PROFILE"
  side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" --output="$RUN_DIR/$F_ROUTER_LOG" \
    "${CONTAINER[@]}" "${SRUN_EXTRA[@]}" env "${COMMON_ENV[@]}" "${ROUTER_CMD[@]}" &
  STEP_PIDS[router]=$!
  wait_router_ready
  record_server_info
}

# run_pass: one timed benchmark through the router (PASS_C, PASS_REPEAT, PASS_PROMPTS, PASS_KEY,
# PASS_BENCH and PASS_CLIENT_LOG set; the files relative to the launch directory).
run_pass() {
  local rc at
  client_command
  log "pass $PASS_KEY of $MODE: ${CLIENT_CMD[*]}"
  event bench_start "pass=$PASS_KEY" "mode=$MODE" "launch=$LAUNCH" "concurrency=$PASS_C" "repeat=$PASS_REPEAT" "prompts=$PASS_PROMPTS"
  scrape_metrics start
  [[ -n ${PASS_PROFILE:-} ]] && profile_request start      # a profiled pass (profile.sh)
  side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" --output="$RUN_DIR/$PASS_CLIENT_LOG" \
    "${CONTAINER[@]}" "${SRUN_EXTRA[@]}" env "${COMMON_ENV[@]}" "${CLIENT_CMD[@]}" &
  CLIENT_PID=$!
  scrape_metrics_during "$CLIENT_PID"
  watch_pass "$CLIENT_PID" "$(pass_limit "$PASS_PROMPTS" "$PASS_C" "$MODE")"
  rc=$?
  CLIENT_PID=""
  # when the client wrote its result (the end of the benchmark it measured; telemetry's window)
  at=$(date -r "$RUN_DIR/$PASS_BENCH" +%s.%3N 2>/dev/null)
  event bench_end "pass=$PASS_KEY" "rc=$rc" ${at:+"output_at=$at"}
  scrape_metrics end
  [[ -n ${PASS_PROFILE:-} ]] && profile_request stop
  if (( rc != 0 )); then
    tail_log "$RUN_DIR/$PASS_CLIENT_LOG"
    fatal client_failed "pass=$PASS_KEY" "rc=$rc" "benchmark client of pass $PASS_KEY exited with status $rc"
  fi
  [[ -s "$RUN_DIR/$PASS_BENCH" ]] || fatal client_failed "pass=$PASS_KEY" "benchmark client wrote no $RUN_DIR/$PASS_BENCH"
}

# run_launch I: launch I from start to teardown (runs as a background subshell of the job).
# shellcheck disable=SC2317  # traps
run_launch() {
  local i=$1 spec
  local -a specs
  LAUNCH=$(( i + 1 ))
  MODE=${LAUNCH_MODES[i]}
  RUN_DIR="$CAMPAIGN_DIR/${LAUNCH_DIRS[i]}"
  MODE_INDEX=${LAUNCH_SERVER[i]}
  local -n roles_ref="MODE_ROLES_$MODE_INDEX" names_ref="MODE_NAMES_$MODE_INDEX"
  GROUP_ROLES=("${roles_ref[@]}")
  GROUP_NAMES=("${names_ref[@]}")
  unset -n roles_ref names_ref
  METRICS_SERVERS=${MODE_METRICS[LAUNCH_SERVER[i]]}
  STEP_PIDS=()
  SAMPLER_PIDS=()
  CLIENT_PID=""
  METRICS_LOOP_PID=""
  TORN_DOWN=0
  trap 'teardown launch-end' EXIT
  trap 'exit 143' TERM INT
  trap 'exit 124' USR1
  mkdir -p "$RUN_DIR/$F_LOGS" || fatal launch "cannot create $RUN_DIR/$F_LOGS"
  # the launch's own events (F_EVENTS in its directory)
  event job_start "job_id=$SLURM_JOB_ID" "run_id=$RUN_ID" "mode=$MODE" "launch=$LAUNCH" "batch_host=$(hostname)"
  record_hosts
  start_servers
  if declare -F start_samplers >/dev/null; then start_samplers; fi     # telemetry (telemetry.sh)
  wait_servers_ready
  check_nccl_network
  make_warmup_body
  # servers are warmed up one by one; prefill/decode roles are proven pair by pair (pd.sh)
  if has_role prefill; then pd_ready; else warmup_replicas; fi
  start_router
  if has_role prefill; then pd_router_canary; fi
  read -ra specs <<<"${LAUNCH_PASSES[i]}"
  for spec in "${specs[@]}"; do
    IFS=: read -r PASS_C PASS_REPEAT PASS_PROMPTS PASS_KEY PASS_BENCH PASS_CLIENT_LOG PASS_PROFILE <<<"$spec"
    run_pass
  done
  log "launch $LAUNCH ($MODE) done: tearing down"
  exit 0
}

# The job's schedule in its events, first thing: a launch_plan line per launch (its mode, directory
# and passes as CONCURRENCY:REPEAT:PROMPTS), so the job's own record says what it was to run (a
# script submitted again writes a directory without manifest).
record_schedule() {
  local i spec c r n prof plan
  local -a specs
  for i in "${!LAUNCH_DIRS[@]}"; do
    plan=""
    read -ra specs <<<"${LAUNCH_PASSES[i]}"
    for spec in "${specs[@]}"; do
      IFS=: read -r c r n _ _ _ prof <<<"$spec"
      plan+="${plan:+,}$c:$r:$n${prof:+:$prof}"
    done
    event launch_plan "launch=$(( i + 1 ))" "mode=${LAUNCH_MODES[i]}" "dir=${LAUNCH_DIRS[i]}" "passes=$plan"
  done
}

# Every launch in turn; returns the status of the last failed launch when none succeeded (0: one did).
run_launches() {
  local i status=0 succeeded=0
  for i in "${!LAUNCH_DIRS[@]}"; do
    event launch_start "launch=$(( i + 1 ))" "mode=${LAUNCH_MODES[i]}" "dir=${LAUNCH_DIRS[i]}"
    run_launch "$i" &
    # While a launch runs, the job's own teardown (scancel, time limit) stops it first, as it
    # would stop a client: SIGTERM, then SIGKILL after the grace period.
    CLIENT_PID=$!
    wait "$CLIENT_PID"
    LAUNCH_RC=$?
    CLIENT_PID=""
    if (( LAUNCH_RC == 0 )); then
      succeeded=$(( succeeded + 1 ))
      event launch_end "launch=$(( i + 1 ))" "mode=${LAUNCH_MODES[i]}" status=ok rc=0
    else
      status=$LAUNCH_RC
      log "launch $(( i + 1 )) (${LAUNCH_MODES[i]}) failed (status $LAUNCH_RC): see ${LAUNCH_DIRS[i]}/$F_EVENTS" >&2
      event launch_end "launch=$(( i + 1 ))" "mode=${LAUNCH_MODES[i]}" status=failed "rc=$LAUNCH_RC"
    fi
  done
  (( succeeded )) && return 0
  return "$status"
}

main() {
  local rc
  prepare_run_dir
  CAMPAIGN_DIR=$RUN_DIR
  event job_start "job_id=$SLURM_JOB_ID" "run_id=$RUN_ID" "mode=$MODE" "batch_host=$(hostname)" "cluster=${SLURM_CLUSTER_NAME:-}"
  record_schedule
  check_secrets
  if declare -F site_prologue >/dev/null; then
    event prologue_start
    site_prologue
    event prologue_end
  fi
  read_hosts
  record_hosts
  (( PREFLIGHT )) && run_preflight
  resolve_addresses
  run_launches
  rc=$?
  log "benchmark done$( (( rc )) && echo " (no launch succeeded: status $rc)"): results in $RUN_DIR (slurm-ab collect $SLURM_JOB_ID)"
  exit "$rc"
}
{% endraw %}
