{% raw %}
# ---- guards of a real site (static): the fabric NCCL chose, hung passes, clean-up of the nodes ---

# NCCL's choice of network on every node of every replica: with NCCL_DEBUG=INFO each rank logs
# "NCCL INFO Using network <name>" when its communicator starts (src/init.cc, NVIDIA/nccl 2.18-2.29:
# comm->ncclNet->name; "IB" covers InfiniBand and RoCE, "Socket" is the TCP fallback, a net plugin
# prints its own name, e.g. IBext_v8). Recorded per node ("nccl_network replica=G node_rank=R node=N
# network=IB"); a node whose ranks chose a name outside cluster.nccl_network's family (NCCL_NAMES)
# fails the launch before the benchmark, naming the node.
check_nccl_network() {
  local g r node f nets name bad="" any=0
  local -a names=("${NCCL_NAMES[@]}")
  (( ${#names[@]} )) || names=("$NCCL_NETWORK")
  for g in "${!HEADS[@]}"; do
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    for r in "${!nodes_ref[@]}"; do
      node=${nodes_ref[r]}
      f=$(rpath "$F_SERVER_LOG" "$g" "$r")
      nets=$(grep -a 'NCCL INFO Using network ' "$f" 2>/dev/null | sed 's/.*NCCL INFO Using network //; s/[[:space:]]*$//' \
        | sort -u | paste -sd, -)
      [[ -n "$nets" ]] && any=1
      event nccl_network "replica=$g" "node_rank=$r" "node=$node" "network=${nets:-unknown}"
      [[ -n "$NCCL_NETWORK" && -z "$bad" ]] || continue
      while IFS= read -r name; do
        [[ -n "$name" ]] && ! in_family "$name" "${names[@]}" && bad="$g|$r|$node|$nets"
      done < <(tr , '\n' <<<"$nets")
    done
  done
  if [[ -n "$NCCL_NETWORK" && $any == 0 ]]; then
    log "no NCCL 'Using network' line in the server logs (NCCL_DEBUG=INFO not in effect?): the fabric is unchecked" >&2
  fi
  [[ -n "$bad" ]] || return 0
  IFS='|' read -r g r node nets <<<"$bad"
  tail_log "$(rpath "$F_SERVER_LOG" "$g" "$r")"
  # shellcheck disable=SC2059  # a generated format (rundir.Layout)
  fatal nccl_network "node=$node" "replica=$g" "node_rank=$r" "network=$nets" "expected=$NCCL_NETWORK" \
    "NCCL on $node (replica $g node rank $r) uses network $nets, not $NCCL_NETWORK (cluster.nccl_network): see $(printf "$F_SERVER_LOG" "$g" "$r")"
}

# in_family NAME PATTERN...: NAME is one of the family's names (patterns: * any text).
in_family() {
  local name=$1 pat
  shift
  for pat in "$@"; do
    # shellcheck disable=SC2053  # a pattern on purpose
    [[ $name == $pat ]] && return 0
  done
  return 1
}

# metric_sum NAME: the sum of every sample of NAME in Prometheus text on stdin (0 when absent).
metric_sum() {
  awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d", s }'
}

# stall_check G: group G's progress counter (WATCH_PROGRESS) and requests in flight (the sum of
# its role's gauges, WATCH_INFLIGHT[role]: a prefill/decode role adds its queue gauges) from its
# /metrics; fails the pass when the counter has not moved for WATCH_STALL_S while requests were in
# flight (or the server no longer answers /metrics), naming the gauges that held them. Reads and
# updates watch_pass's prog / prog_at / inflight / held.
stall_check() {
  local g=$1 text count n=0 m v now="" state=answered what="is stalled"
  local -a gauges=()
  read -ra gauges <<<"${WATCH_INFLIGHT[${GROUP_ROLES[g]:-server}]:-}"
  if text=$(curl -sS -m "$METRICS_TIMEOUT" "http://${ADDRS[g]}:${PORTS[g]}/metrics" 2>&1); then
    count=$(metric_sum "$WATCH_PROGRESS" <<<"$text")
    for m in "${gauges[@]}"; do
      v=$(metric_sum "$m" <<<"$text")
      n=$(( n + v ))
      (( v > 0 )) && now+="${now:+,}$m:$v"
    done
    # the clock runs from the last finished request, or from when requests arrived at an idle server
    if [[ "${prog[$g]:-}" != "$count" || "${inflight[$g]:-0}" == 0 ]]; then
      prog[$g]=$count
      prog_at[$g]=$SECONDS
      inflight[$g]=$n
      held[$g]=$now
      return 0
    fi
    inflight[$g]=$n
    held[$g]=$now
  else
    state="did not answer ($(tail -n 1 <<<"$text"))"
  fi
  (( SECONDS - prog_at[$g] >= WATCH_STALL_S )) || return 0
  [[ "${inflight[$g]:-?}" == 0 ]] && return 0          # idle, not hung
  [[ $state == answered ]] || what="is stalled or unreachable from the batch host"
  tail_log "$(rpath "$F_SERVER_LOG" "$g" 0)"
  fatal stalled "replica=$g" "role=${GROUP_ROLES[g]:-server}" "node=${HEADS[g]}" "pass=${PASS_KEY:-bench}" \
    "seconds=$(( SECONDS - prog_at[$g] ))" "inflight=${inflight[$g]:-?}" "held=${held[$g]:-}" "finished=${prog[$g]:-?}" \
    "metrics=${state%% *}" \
    "$(group_name "$g") (head ${HEADS[g]}) $what: no request finished for $(( SECONDS - prog_at[$g] )) s while ${inflight[$g]:-some} were in flight (${held[$g]:-its gauges unread}; $WATCH_PROGRESS stayed at ${prog[$g]:-?}; its /metrics $state)"
}

# pass_limit PROMPTS CONCURRENCY MODE [RATE]: seconds a pass may take, WATCH_FACTOR_PCT % of its
# estimate (ceil(PROMPTS / CONCURRENCY) requests of REQUEST_MS[MODE:CONCURRENCY:PROMPTS] each, plus
# PASS_OVERHEAD_S; an open-loop pass at RATE req/s: PROMPTS / RATE plus 4 requests' time, as
# duration.py); 0: none.
pass_limit() {
  local prompts=$1 conc=$2 mode=$3 rate=${4:-inf} ms rounds whole frac milli
  ms=${REQUEST_MS[$mode:$conc:$prompts]:-0}
  (( ms > 0 && conc > 0 )) || { echo 0; return 0; }
  if [[ $rate != inf ]]; then
    whole=${rate%%.*} frac=${rate#"$whole"}; frac=${frac#.}000; milli=$(( 10#${whole:-0} * 1000 + 10#${frac:0:3} ))
    (( milli > 0 )) && { echo $(( (prompts * 1000 / milli + 4 * ms / 1000 + PASS_OVERHEAD_S) * WATCH_FACTOR_PCT / 100 )); return 0; }
  fi
  rounds=$(( (prompts + conc - 1) / conc ))
  echo $(( (rounds * ms / 1000 + PASS_OVERHEAD_S) * WATCH_FACTOR_PCT / 100 ))
}

# watch_pass PID LIMIT_S: watch_pid for the benchmark client, and the pass fails (the job's
# teardown stops the client and the servers) when it runs longer than LIMIT_S (0: no limit), or
# a server stalls (stall_check, every WATCH_EVERY s). Returns the client's exit status.
watch_pass() {
  local pid=$1 limit=$2 start=$SECONDS next=0 g
  local -A prog=() prog_at=() inflight=() held=()
  for g in "${!HEADS[@]}"; do prog_at[$g]=$SECONDS; done
  while kill -0 "$pid" 2>/dev/null; do
    alive_or_die
    if (( limit > 0 && SECONDS - start >= limit )); then
      fatal pass_timeout "pass=${PASS_KEY:-bench}" "limit=$limit" "seconds=$(( SECONDS - start ))" \
        "pass ${PASS_KEY:-bench} ran $(( SECONDS - start )) s, past its limit of $limit s (watchdog.pass_factor x its estimate)"
    fi
    if (( METRICS_SERVERS && WATCH_STALL_S > 0 && SECONDS >= next )); then
      next=$(( SECONDS + WATCH_EVERY ))
      for g in "${!HEADS[@]}"; do stall_check "$g"; done
    fi
    nap
  done
  wait "$pid"
}

# At the job's end, on every node, outside any container: remove the job's named container of the
# node's het group (CT_PREFIX<job id>-<G>: pyxis keeps named containers in its default
# container_scope=global) and the per-job cache directory (CLEANUP_CACHE). One step per component,
# bounded in time; recorded as "cleanup container=... cache=... ok=1|0" (ok=0: something may remain
# on the nodes of the job, which the next job's preflight there sweeps, or `slurm-ab clean`).
# shellcheck disable=SC2317  # runs from a trap
cleanup_nodes() {
  local g rc=0 name="" tag others
  local -a pids=()
  [[ -n "${CT_PREFIX:-}${CLEANUP_CACHE:-}" ]] || return 0
  [[ -n "${CT_PREFIX:-}" ]] && name="$CT_PREFIX$SLURM_JOB_ID"
  # a campaign's other images have containers of their own (CT_TAGS: -i<K>, from the plan), removed
  # too; they count for nothing when absent (a mode that never ran; the sweep also finds them)
  for g in "${!HEADS[@]}"; do
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    others=""
    if [[ -n $name ]]; then for tag in "${CT_TAGS[@]}"; do others+=" $name$tag-$g"; done; fi
    ( drop_gpu_request
      # shellcheck disable=SC2016  # expands on the node
      exec timeout 60 srun --het-group="$g" --nodes="${#nodes_ref[@]}" "${NODE_STEP[@]}" "${SRUN_EXTRA[@]}" \
        --output="$(rpath "$F_CLEANUP_LOG" "$g" %t)" bash -c \
        'rc=0; if [ -n "$1" ]; then "${@:4}" "$1" || rc=1; fi; for n in $3; do "${@:4}" "$n" >/dev/null 2>&1; done
         if [ -n "$2" ]; then rm -rf -- "$2" || rc=1; fi; exit $rc' \
        cleanup "${name:+$name-$g}" "${CLEANUP_CACHE:-}" "$others" "${REMOVE_CMD[@]}" ) &
    pids+=($!)
  done
  for g in "${pids[@]}"; do wait "$g" || rc=1; done
  name=${name:+$name-*}
  event cleanup "container=${name:-none}" "cache=${CLEANUP_CACHE:-none}" "ok=$(( rc == 0 ))"
  # shellcheck disable=SC2059  # a generated format (rundir.Layout)
  (( rc == 0 )) || log "clean-up of the nodes failed (see $(printf "$F_CLEANUP_LOG" '*' '*')): a container or cache directory may remain" >&2
  return 0
}
{% endraw %}
