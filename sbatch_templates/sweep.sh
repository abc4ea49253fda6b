{% raw %}
# ---- nothing left behind (static): what ended jobs of this user left on the job's nodes ---------
# A job's named containers (pyxis_<name>-<job id>-<G>, container_scope=global) and per-job cache
# directories (<cache base>/slurm-ab-<job id>) are removed by the job's own clean-up step at its
# end; Slurm refuses that step once the job is cancelled, timed out or lost a node ("Slurm job N has
# expired"), so what such a job leaves is removed here, before the next job's preflight, on every
# node of the next job, outside any container. Only jobs Slurm no longer lists (squeue -u: never a
# pending or running job's), and only ids up to this job's own (one submitted after the squeue
# call has a larger id); this job's own id too (the id wrapped: not this job's, which creates its
# own only in the preflight).

# stale ID OWN ACTIVE: job ID's leftovers may go (ACTIVE: ",<id>,<id>," of the user's listed jobs).
# shellcheck disable=SC2317  # runs on the nodes, through sweep.sh
stale() {
  local id=$1 own=$2 active=$3
  [[ $id =~ ^[0-9]+$ ]] || return 1
  (( id == own )) && return 0
  (( id < own )) && [[ $active != *",$id,"* ]]
}

# sweep_node OWN ACTIVE PREFIX BASE: on one node, print "removed|failed container|cache NAME" per
# leftover of an ended job (LIST_CMD / REMOVE_CMD: the site's enroot list / enroot remove -f).
# shellcheck disable=SC2317  # runs on the nodes, through sweep.sh
sweep_node() {
  local own=$1 active=$2 prefix=$3 base=$4 name id d
  local -a names=()
  if [[ -n $prefix ]] && (( ${#LIST_CMD[@]} )); then
    mapfile -t names < <("${LIST_CMD[@]}" 2>/dev/null)
    for name in "${names[@]}"; do
      [[ $name == "$prefix"* ]] || continue
      id=${name#"$prefix"}
      stale "${id%%-*}" "$own" "$active" || continue
      if "${REMOVE_CMD[@]}" "$name" >/dev/null 2>&1; then echo "removed container $name"; else echo "failed container $name"; fi
    done
  fi
  [[ -n $base && -d $base ]] || return 0
  for d in "$base"/slurm-ab-*; do
    [[ -d $d && -O $d ]] || continue
    stale "${d##*/slurm-ab-}" "$own" "$active" || continue
    rm -rf -- "$d" 2>/dev/null
    if [[ -e $d ]]; then echo "failed cache $d"; else echo "removed cache $d"; fi
  done
}

# The user's jobs Slurm lists (pending, running, completing: every component's id and the het
# job's), as ",<id>,...,"; fails when squeue does not answer (then nothing is swept).
active_jobs() {
  local out
  out=$(timeout 20 squeue -h -u "${SLURM_JOB_USER:-$(id -un)}" -o '%i %A' 2>/dev/null) || return 1
  # "%i %A": "6+1 7" is het job 6's component 1, whose own id is 7
  printf ',%s,\n' "$(awk '{ sub(/[+_].*/, "", $1); print $1; print $2 }' <<<"$out" | grep -E '^[0-9]+$' | sort -u | paste -sd, -)"
}

# Before the preflight: sweep_node on every node of every component (one step each, bounded in
# time); recorded as "sweep removed=N failed=M" with the names in the job's output.
sweep_nodes() {
  local g active script="$RUN_DIR/preflight/sweep.sh" line removed=0 failed=0
  local -a pids=()
  (( SWEEP )) && [[ -n "$CT_PREFIX$CACHE_BASE" ]] || return 0
  if ! active=$(active_jobs); then
    log "sweep of ended jobs' containers and caches skipped: squeue did not answer" >&2
    event sweep skipped=squeue
    return 0
  fi
  mkdir -p "$RUN_DIR/preflight" || return 0
  { echo '#!/bin/bash'
    declare -p LIST_CMD REMOVE_CMD
    declare -f stale sweep_node
    echo 'sweep_node "$@"'; } >"$script"
  for g in "${!HEADS[@]}"; do
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    ( drop_gpu_request
      exec timeout 60 srun --het-group="$g" --nodes="${#nodes_ref[@]}" "${NODE_STEP[@]}" "${SRUN_EXTRA[@]}" \
        --output="$RUN_DIR/logs/sweep-r$g-n%t.log" bash "$script" "$SLURM_JOB_ID" "$active" "$CT_PREFIX" "$CACHE_BASE" ) &
    pids+=($!)
  done
  wait "${pids[@]}" 2>/dev/null
  while IFS= read -r line; do
    [[ $line == removed* ]] && removed=$(( removed + 1 ))
    [[ $line == failed* ]] && failed=$(( failed + 1 ))
    log "sweep: $line (an ended job's)" >&2
  done < <(cat "$RUN_DIR"/logs/sweep-r*-n*.log 2>/dev/null | grep -E '^(removed|failed) ' | sort -u)
  event sweep "removed=$removed" "failed=$failed"
}
{% endraw %}
