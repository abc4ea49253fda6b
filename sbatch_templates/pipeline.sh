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

# cluster.secret_env from the run's secrets file (slurm-ab submit wrote it, mode 0600, and kept the
# names out of sbatch's environment): into this shell's environment, which the srun steps inherit;
# never on a command line, in the script or in the job's environment record. Removed once read. A
# script submitted by hand (slurm-ab render) has none: its steps inherit what sbatch exported.
load_secrets() {
  local f="$RUN_DIR/$F_SECRETS"
  [[ -f $f ]] || return 0
  # shellcheck disable=SC1090  # the submitter's own file
  source "$f" || fatal missing_secret "cannot read the secrets file $f"
  rm -f -- "$f"
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
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    HEADS[g]=${nodes_ref[0]}
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
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    event hosts "replica=$g" "head=${HEADS[g]}" "nodes=$(IFS=,; echo "${nodes_ref[*]}")" "port=${PORTS[g]}" "dist_port=${DIST_PORTS[g]}" \
      ${BOOT_PORTS[g]:+"bootstrap_port=${BOOT_PORTS[g]}"}
  done
  event ports "router=$ROUTER_PORT" "router_metrics=$ROUTER_METRICS_PORT"
}

# The preflight: one short step per component, on every node, in the servers' container. It fails
# the job within seconds, naming node and cause, before any model loads; each node writes what it
# found to its preflight report (F_PREFLIGHT_REPORT). run_preflight I: again for mode I, which runs
# in another image or environment (PF_SOFTWARE): its container, environment and modules, its
# reports tagged "@<mode>" (F_PREFLIGHT_REPORT of "<node>@<mode>"), run in a subshell.
run_preflight() {
  local g ref
  local -a extra
  if [[ -n "${1:-}" ]]; then
    MODE_INDEX=$1
    use_mode_software
    PF_TAG="@${MODE_LIST[$1]}"
    ref="PF_MODULES_$1[@]"; PF_MODULES=(${!ref+"${!ref}"})
    ref="PF_CLIENT_MODULES_$1[@]"; PF_CLIENT_MODULES=(${!ref+"${!ref}"})
    ref="PF_CLIENT_IMPORT_$1[@]"; PF_CLIENT_IMPORT=(${!ref+"${!ref}"})
  fi
  write_preflight_script
  event preflight_start ${PF_TAG:+"mode=${PF_TAG#@}"}
  for g in "${!HEADS[@]}"; do
    extra=()
    (( g == 0 )) && extra=("$ROUTER_PORT" "$ROUTER_METRICS_PORT")
    [[ -n "${BOOT_PORTS[g]:-}" ]] && extra+=("${BOOT_PORTS[g]}")
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    in_image "$g" SERVER_ENV
    srun --het-group="$g" --nodes="${#nodes_ref[@]}" --ntasks-per-node=1 \
      --output="$(rpath "$F_PREFLIGHT_LOG" "$g" %t)" "${CT[@]}" "${SRUN_EXTRA[@]}" \
      "${IN_IMAGE[@]}" bash "$(preflight_script)" "$g" "${PORTS[g]}" "${DIST_PORTS[g]}" "${extra[@]}" &
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
  local g ref ipdir
  local -a cmd
  for g in "${!HEADS[@]}"; do
    ipdir=""
    if declare -F host_ip_dir >/dev/null; then ipdir=$(host_ip_dir "$g"); fi
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    ref="SERVER_CMD_${MODE_INDEX}_${GROUP_ROLES[g]}[@]"
    cmd=("${!ref}")
    [[ ${GROUP_ROLES[g]} == prefill ]] && cmd+=(--disaggregation-bootstrap-port "${BOOT_PORTS[g]}")
    if declare -F nsys_wrap >/dev/null; then nsys_wrap "$g"; fi       # profile.nsys (profile.sh)
    log "launch $LAUNCH ($MODE), $(group_name "$g"): starting SGLang on ${nodes_ref[*]} (head ${HEADS[g]}:${PORTS[g]})"
    event server_launch "replica=$g" "role=${GROUP_ROLES[g]}"
    in_image "$g" SERVER_ENV
    # $SLURM_NODEID must expand on each node, not here; so must the node's SGLANG_HOST_IP (the
    # preflight's file of the node, when IPDIR is set: pd.host_ip_interface)
    # shellcheck disable=SC2016
    srun --het-group="$g" --nodes="${#nodes_ref[@]}" --ntasks-per-node=1 --kill-on-bad-exit=1 "${SERVER_STEP[@]}" \
      --output="$(rpath "$F_SERVER_LOG" "$g" %t)" "${CT[@]}" "${SRUN_EXTRA[@]}" \
      bash -c 'ip=""; n=${SLURMD_NODENAME:-${HOSTNAME:-unknown}}
        if [[ -n $1 ]]; then printf -v f "%s/$2" "$1" "$n"; ip=$(cat "$f") || { echo "slurm-ab: no SGLANG_HOST_IP for $n ($f)" >&2; exit 1; }; fi
        shift 2; exec env ${ip:+"SGLANG_HOST_IP=$ip"} "$@" --node-rank "$SLURM_NODEID"' \
      "server-r$g" "$ipdir" "${F_PREFLIGHT_HOST_IP:-}" "${IN_IMAGE[@]}" "${cmd[@]}" \
      --dist-init-addr "${ADDRS[g]}:${DIST_PORTS[g]}" --port "${PORTS[g]}" &
    STEP_PIDS[server-r$g]=$!
  done
}

start_router() {
  router_command
  log "router: ${ROUTER_CMD[*]}"
  event router_launch "port=$ROUTER_PORT" "host=$ROUTER_HOST" "profile=$ROUTER_PROFILE"
  in_image 0 COMMON_ENV
  side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" --output="$RUN_DIR/$F_ROUTER_LOG" \
    "${CT[@]}" "${SRUN_EXTRA[@]}" "${IN_IMAGE[@]}" "${ROUTER_CMD[@]}" &
  STEP_PIDS[router]=$!
  wait_router_ready
  record_server_info
}

# run_pass: one timed benchmark through the router (PASS_C, PASS_REPEAT, PASS_PROMPTS, PASS_KEY,
# PASS_BENCH, PASS_CLIENT_LOG and PASS_RATE set; the files relative to the launch directory;
# PASS_RATE "inf": closed loop at PASS_C, else requests per second).
run_pass() {
  local rc at
  client_command
  log "pass $PASS_KEY of $MODE: ${CLIENT_CMD[*]}"
  event bench_start "pass=$PASS_KEY" "mode=$MODE" "launch=$LAUNCH" "concurrency=$PASS_C" "repeat=$PASS_REPEAT" "prompts=$PASS_PROMPTS" \
    "rate=$PASS_RATE"
  scrape_metrics start
  [[ -n ${PASS_PROFILE:-} ]] && profile_request start      # a profiled pass (profile.sh)
  in_image 0 COMMON_ENV
  side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" --output="$RUN_DIR/$PASS_CLIENT_LOG" \
    "${CT[@]}" "${SRUN_EXTRA[@]}" "${IN_IMAGE[@]}" "${CLIENT_CMD[@]}" &
  CLIENT_PID=$!
  scrape_metrics_during "$CLIENT_PID"
  watch_pass "$CLIENT_PID" "$(pass_limit "$PASS_PROMPTS" "$PASS_C" "$MODE" "$PASS_RATE")"
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
  local i=$1 spec ref
  local -a specs
  LAUNCH=$(( i + 1 ))
  MODE=${LAUNCH_MODES[i]}
  RUN_DIR="$CAMPAIGN_DIR/${LAUNCH_DIRS[i]}"
  MODE_INDEX=${LAUNCH_SERVER[i]}
  ref="MODE_ROLES_${MODE_INDEX}[@]"
  GROUP_ROLES=("${!ref}")
  ref="MODE_NAMES_${MODE_INDEX}[@]"
  GROUP_NAMES=("${!ref}")
  METRICS_SERVERS=${MODE_METRICS[LAUNCH_SERVER[i]]}
  use_mode_software
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
  correctness_canary
  read -ra specs <<<"${LAUNCH_PASSES[i]}"
  for spec in "${specs[@]}"; do
    IFS=: read -r PASS_C PASS_REPEAT PASS_PROMPTS PASS_KEY PASS_BENCH PASS_CLIENT_LOG PASS_RATE PASS_PROFILE <<<"$spec"
    PASS_RATE=${PASS_RATE:-inf}
    if [[ $PASS_RATE == search ]]; then capacity_rate || break; fi
    run_pass
  done
  log "launch $LAUNCH ($MODE) done: tearing down"
  exit 0
}

# capacity_rate: a capacity search's probe PASS_KEY gets its rate from the search's program, run on
# ROUTER_HOST by the client's Python in the launch's image (the earlier probes' files decide it);
# recorded as "capacity_probe pass=.. rate=.." ("decision=done": the search has ended). Returns 1
# when there is no next probe (the program said done, or failed: "decision=error", its log kept).
capacity_rate() {
  local out rc
  out=$(rpath "$F_CAPACITY_LOG" "$PASS_KEY")
  in_image 0 COMMON_ENV
  ( side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" "${CT[@]}" "${SRUN_EXTRA[@]}" \
      "${IN_IMAGE[@]}" LC_ALL=C "${CAPACITY_PY[@]}" "$CAMPAIGN_DIR/$F_CAPACITY_PROGRAM" \
      "$CAMPAIGN_DIR/$F_CAPACITY_SPEC" "$RUN_DIR" "$PASS_KEY" ) >"$out.rate" 2>"$out"
  rc=$?
  PASS_RATE=$(tail -n 1 "$out.rate" 2>/dev/null)
  cat -- "$out.rate" >>"$out" 2>/dev/null
  rm -f -- "$out.rate"
  if (( rc != 0 )) || ! [[ $PASS_RATE =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    event capacity_probe "pass=$PASS_KEY" "decision=${PASS_RATE:-error}" "rc=$rc"
    [[ $PASS_RATE == "done" ]] || log "capacity search: no rate for $PASS_KEY (status $rc; see $out)" >&2
    return 1
  fi
  event capacity_probe "pass=$PASS_KEY" "rate=$PASS_RATE"
  log "capacity search: $PASS_KEY at $PASS_RATE req/s"
}

# sequential_look N: after launch N. When N ends a block (SEQ_LOOK_AFTER), the stop rule looks at
# the blocks so far (a step on ROUTER_HOST with the client's Python, in the launch's image as the other
# side steps: in_image; reading the clients' own pass files); the
# look goes into events.log. Returns 0 when it decided: the campaign ends here, at a block's end
# (sequential_stop), so the design stays balanced.
sequential_look() {
  local n=$1 k=0 j out decision=""
  local -a fields
  for j in "${!SEQ_LOOK_AFTER[@]}"; do
    (( SEQ_LOOK_AFTER[j] == n )) && k=$(( j + 1 ))
  done
  (( k )) || return 1
  in_image 0 COMMON_ENV
  out=$(side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" "${CT[@]}" "${SRUN_EXTRA[@]}" \
    "${IN_IMAGE[@]}" LC_ALL=C "${SEQ_PYTHON[@]}" "$RUN_DIR/$F_STOP_RULE" "$RUN_DIR/$F_SEQ_SPEC" "$k" "$RUN_DIR" \
    2>>"$RUN_DIR/$F_STOP_RULE_LOG")
  if [[ $out != look=* ]]; then
    event sequential_look "look=$k" decision=error "note=stop_rule_failed_see_$F_STOP_RULE_LOG"
    return 1
  fi
  read -ra fields <<<"$out"
  event sequential_look "${fields[@]}"
  for j in "${fields[@]}"; do
    [[ $j == decision=* ]] && decision=${j#decision=}
  done
  case $decision in
    better|worse|equivalent)
      log "sequential look $k after launch $n: $decision; the campaign stops at this block's end"
      event sequential_stop "look=$k" "decision=$decision" "launches_run=$n" "launches_planned=${#LAUNCH_DIRS[@]}"
      return 0 ;;
  esac
  return 1
}

# time_left: seconds until the job's time limit as Slurm says (squeue %L: [D-][H:]M:S), less
# TIME_RESERVE_S (the job's own early stop and Slurm's early warning); "" when Slurm does not say
# (UNLIMITED, no answer).
time_left() {
  local out
  out=$(LC_ALL=C timeout 10 squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null | head -n 1)
  out=${out//[[:space:]]/}
  [[ $out =~ ^(([0-9]+)-)?(([0-9]+):)?([0-9]+):([0-9]+)$ ]] || return 0
  echo $(( 10#${BASH_REMATCH[2]:-0} * 86400 + 10#${BASH_REMATCH[4]:-0} * 3600 + 10#${BASH_REMATCH[5]} * 60 \
    + 10#${BASH_REMATCH[6]} - TIME_RESERVE_S ))
}

# block_fits N: before launch N. When N starts a block (TIME_BLOCKS), the block must fit in the time
# left: its expected seconds, or its launches at the pace of the slowest block this job has run
# (seconds per launch), whichever is more. A block that cannot finish is not started (time_stop):
# the campaign ends at a block boundary, its design balanced, instead of being killed part-way at
# the time limit. Returns 1 to stop.
BLOCK_AT=-1
BLOCK_SIZE=1
BLOCK_PACE=0
block_fits() {
  local n=$1 k size need left pace
  for (( k = 0; k < ${#TIME_BLOCKS[@]}; k++ )); do
    (( ${TIME_BLOCKS[k]%%:*} == n )) || continue
    if (( BLOCK_AT >= 0 )); then
      pace=$(( (SECONDS - BLOCK_AT + BLOCK_SIZE - 1) / BLOCK_SIZE ))
      (( pace > BLOCK_PACE )) && BLOCK_PACE=$pace
    fi
    if (( k + 1 < ${#TIME_BLOCKS[@]} )); then size=$(( ${TIME_BLOCKS[k+1]%%:*} - n )); else size=$(( ${#LAUNCH_DIRS[@]} - n + 1 )); fi
    BLOCK_AT=$SECONDS BLOCK_SIZE=$size
    need=$(( BLOCK_PACE * size ))
    (( ${TIME_BLOCKS[k]#*:} > need )) && need=${TIME_BLOCKS[k]#*:}
    left=$(time_left)
    event time_check "block=$(( k + 1 ))" "launch=$n" "need_s=$need" "left_s=${left:-unknown}"
    [[ -z $left ]] || (( left >= need )) && return 0
    log "block $(( k + 1 )) of ${#TIME_BLOCKS[@]} (launch $n on) needs ~$need s, the job has $left s left: the campaign stops here, at a block boundary" >&2
    event time_stop "block=$(( k + 1 ))" "blocks=${#TIME_BLOCKS[@]}" "launches_run=$(( n - 1 ))" \
      "launches_planned=${#LAUNCH_DIRS[@]}" "need_s=$need" "left_s=$left"
    return 1
  done
  return 0
}

# The job's schedule in its events, first thing: a launch_plan line per launch (its mode, directory
# and passes as CONCURRENCY:REPEAT:PROMPTS[:RATE][:profile]), so the job's own record says what it was to run (a
# script submitted again writes a directory without manifest).
record_schedule() {
  local i spec c r n q prof plan
  local -a specs
  for i in "${!LAUNCH_DIRS[@]}"; do
    plan=""
    read -ra specs <<<"${LAUNCH_PASSES[i]}"
    for spec in "${specs[@]}"; do
      IFS=: read -r c r n _ _ _ q prof <<<"$spec"
      plan+="${plan:+,}$c:$r:$n"
      [[ ${q:-inf} == inf ]] || plan+=":$q"
      plan+="${prof:+:$prof}"
    done
    event launch_plan "launch=$(( i + 1 ))" "mode=${LAUNCH_MODES[i]}" "dir=${LAUNCH_DIRS[i]}" "passes=$plan"
  done
}

# The image and environments of mode MODE_INDEX when the modes differ in them (MODE_SOFTWARE: its
# CONTAINER_<i>, IMAGE_EXEC_<i>, SERVER_ENV_<i>, COMMON_ENV_<i>); every step reads them through
# in_image, which adds the locale and the cache's variables as for the job's own (an empty array
# through ${!ref}: ${!ref+"${!ref}"}, as bash 4.4's set -u counts it unbound).
use_mode_software() {
  local ref
  (( ${MODE_SOFTWARE:-0} )) || return 0
  ref="CONTAINER_${MODE_INDEX}[@]"; CONTAINER=(${!ref+"${!ref}"})
  ref="CONTAINER_TAG_${MODE_INDEX}"; CONTAINER_TAG=${!ref:-}
  ref="IMAGE_EXEC_${MODE_INDEX}[@]"; IMAGE_EXEC=(${!ref+"${!ref}"})
  ref="SERVER_ENV_${MODE_INDEX}[@]"
  # shellcheck disable=SC2034  # read by in_image (its ENV argument)
  SERVER_ENV=(${!ref+"${!ref}"})
  ref="COMMON_ENV_${MODE_INDEX}[@]"
  # shellcheck disable=SC2034
  COMMON_ENV=(${!ref+"${!ref}"})
}

# Every launch in turn; returns the status of the last failed launch when none succeeded (0: one did).
run_launches() {
  local i status=0 succeeded=0
  for i in "${!LAUNCH_DIRS[@]}"; do
    block_fits "$(( i + 1 ))" || break
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
    # a sequential campaign (its script defines write_stop_rule): a look after each block
    declare -F write_stop_rule >/dev/null && sequential_look "$(( i + 1 ))" && break
  done
  (( succeeded )) && return 0
  return "$status"
}

main() {
  local rc i
  prepare_run_dir
  CAMPAIGN_DIR=$RUN_DIR
  if declare -F write_stop_rule >/dev/null; then write_stop_rule; fi
  event job_start "job_id=$SLURM_JOB_ID" "run_id=$RUN_ID" "mode=$MODE" "batch_host=$(hostname)" "cluster=${SLURM_CLUSTER_NAME:-}"
  load_secrets
  record_schedule
  if declare -F write_capacity_files >/dev/null; then write_capacity_files; fi
  check_secrets
  if declare -F site_prologue >/dev/null; then
    event prologue_start
    site_prologue
    event prologue_end
  fi
  read_hosts
  record_hosts
  enroot_paths
  sweep_nodes
  if (( PREFLIGHT )); then
    run_preflight
    for i in "${PF_SOFTWARE[@]}"; do
      ( run_preflight "$i" ) || exit 1      # its fail event is recorded; the job's EXIT trap tears down
    done
  fi
  resolve_addresses
  run_launches
  rc=$?
  log "benchmark done$( (( rc )) && echo " (no launch succeeded: status $rc)"): results in $RUN_DIR (slurm-ab collect $SLURM_JOB_ID)"
  exit "$rc"
}
{% endraw %}
