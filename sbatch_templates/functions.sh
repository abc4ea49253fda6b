{% raw %}
# ---- helpers (static) ------------------------------------------------------------------------
declare -A STEP_PIDS=()   # step name -> srun pid; all are critical: if one exits, the job fails
TORN_DOWN=0
WARMUP_BODY=""

log() { printf '%s slurm-ab: %s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*"; }

# events.log: "<epoch_s.ms> <YYYY-mm-dd HH:MM:SS.mmm> <event> [key=value ...]", read by the collector.
event() {
  local stamp
  stamp=$(date '+%s.%3N %Y-%m-%d %H:%M:%S.%3N')
  printf '%s %s\n' "$stamp" "$*" >>"$RUN_DIR/events.log"
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

step_logs() {
  case $1 in
    server-r*) printf '%s\n' "$RUN_DIR/logs/$1"-n*.log ;;
    *) printf '%s\n' "$RUN_DIR/logs/$1.log" ;;
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
      if curl -fsS -m 5 -o /dev/null "http://${HEADS[g]}:${PORTS[g]}/health" 2>/dev/null; then
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
        tail_log "$RUN_DIR/logs/server-r$g-n0.log"
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
  WARMUP_BODY="$RUN_DIR/logs/warmup-request.json"
  printf '{"input_ids":[%s],"sampling_params":{"max_new_tokens":%d,"temperature":0,"ignore_eos":true},"stream":false}\n' \
    "$ids" "$WARMUP_OUTPUT_LEN" >"$WARMUP_BODY"
}

# One direct request to replica G's head (not through the router); it must succeed with every
# input token counted.
warmup_replica() {
  local g=$1 out code rc
  out="$RUN_DIR/logs/warmup-r$g.json"
  log "replica $g: warm-up ${WARMUP_INPUT_LEN} -> ${WARMUP_OUTPUT_LEN} tokens"
  event warmup_start "replica=$g"
  curl -sS -m "$WARMUP_TIMEOUT" -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "@$WARMUP_BODY" "http://${HEADS[g]}:${PORTS[g]}/generate" >"$out.http" 2>>"$out.http" &
  watch_pid $!
  rc=$?
  code=$(head -c 3 "$out.http" 2>/dev/null)
  if (( rc != 0 )) || [[ "$code" != 200 ]] || ! grep -Eq "\"prompt_tokens\": *$WARMUP_INPUT_LEN\b" "$out"; then
    event warmup_done "replica=$g" ok=0 "http=${code:-none}" "curl_rc=$rc"
    alive_or_die
    tail_log "$out" "$RUN_DIR/logs/server-r$g-n0.log"
    fatal warmup_failed "replica=$g" "warm-up of replica $g failed (curl status $rc, HTTP ${code:-none})"
  fi
  event warmup_done "replica=$g" ok=1 http=200 "prompt_tokens=$WARMUP_INPUT_LEN"
}

wait_router_ready() {
  local start=$SECONDS body n
  while :; do
    body=$(curl -fsS -m 5 "http://$ROUTER_HOST:$ROUTER_PORT$ROUTER_READY_PATH" 2>/dev/null)
    n=$(grep -Eo "\"$ROUTER_READY_FIELD\": *[0-9]+" <<<"$body" | grep -Eo '[0-9]+$')
    if [[ -n "$n" ]] && (( n >= REPLICAS )); then
      log "router ready with $n healthy workers after $(( SECONDS - start )) s"
      event router_ready "workers=$n" "seconds=$(( SECONDS - start ))"
      return 0
    fi
    alive_or_die
    if (( SECONDS - start >= ROUTER_READY_TIMEOUT )); then
      tail_log "$RUN_DIR/logs/router.log"
      fatal router_not_ready "router not ready with $REPLICAS healthy workers after $ROUTER_READY_TIMEOUT s (last: ${body:-no answer})"
    fi
    nap
  done
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

# Stop every step: SIGTERM (srun forwards it to the tasks), SIGKILL after the grace period, then
# cancel any step that is still known to Slurm. Runs once, on every exit path.
# shellcheck disable=SC2317  # runs from a trap
teardown() {
  local reason=$1 pid step deadline
  (( TORN_DOWN )) && return 0
  TORN_DOWN=1
  event teardown "reason=$reason"
  local -a pids=()
  [[ -n "${CLIENT_PID:-}" ]] && pids+=("$CLIENT_PID")
  for pid in "${STEP_PIDS[@]}"; do pids+=("$pid"); done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  deadline=$(( SECONDS + GRACE ))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  while read -r step; do
    case $step in *.batch | *.extern | "") ;; *) scancel --signal=KILL "$step" 2>/dev/null ;; esac
  done < <(squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null)
  wait 2>/dev/null
  record_node_states
  log "teardown ($reason) done"
}

# shellcheck disable=SC2317  # runs from a trap
on_exit() {
  local rc=$?
  teardown exit
  event job_end "rc=$rc"
  exit "$rc"
}
# shellcheck disable=SC2317  # runs from a trap
on_signal() {
  log "FATAL: received SIG$1 (scancel, node failure, preemption or time limit): stopping" >&2
  event fail kind=signal "signal=$1"
  teardown "signal-$1"
  exit 143
}
# shellcheck disable=SC2317  # runs from a trap
on_time_limit() {
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
