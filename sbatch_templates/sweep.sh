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
# shellcheck disable=SC2317  # runs on the nodes, through the run's sweep script (F_SWEEP_SCRIPT)
stale() {
  local id=$1 own=$2 active=$3
  [[ $id =~ ^[0-9]+$ ]] || return 1
  (( id == own )) && return 0
  (( id < own )) && [[ $active != *",$id,"* ]]
}

# sweep_node OWN ACTIVE PREFIX BASE: on one node, print "removed|failed container|cache NAME" per
# leftover of an ended job (LIST_CMD / REMOVE_CMD: the site's enroot list / enroot remove -f).
# shellcheck disable=SC2317  # runs on the nodes, through the run's sweep script (F_SWEEP_SCRIPT)
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

# enroot's data and cache paths for this job's containers (ENROOT_DIR, container.enroot_dir): where
# enroot would keep them under HOME (its defaults, or a shared HOME's enroot.conf), XDG_DATA_HOME /
# XDG_CACHE_HOME (which pyxis passes to enroot; ENROOT_* it does not) point to a node-local
# <dir>/slurm-ab-enroot-<uid>. `enroot info` (enroot 3.4+) says the effective paths; without it, the
# site's enroot.conf. Recorded as "enroot_paths data=... cache=...".
enroot_paths() {
  local info data cache base conf=/etc/enroot/enroot.conf
  [[ -n ${ENROOT_DIR:-} && -n ${HOME:-} ]] || return 0
  if info=$(env -u XDG_DATA_HOME -u XDG_CACHE_HOME timeout 20 enroot info 2>/dev/null); then
    data=$(sed -n 's/^ *ENROOT_DATA_PATH=//p' <<<"$info")
    cache=$(sed -n 's/^ *ENROOT_CACHE_PATH=//p' <<<"$info")
  else                                # an older enroot: its defaults unless the site's file sets them
    grep -Eq '^[[:space:]]*ENROOT_DATA_PATH[[:space:]]' "$conf" 2>/dev/null || data="$HOME/.local/share/enroot"
    grep -Eq '^[[:space:]]*ENROOT_CACHE_PATH[[:space:]]' "$conf" 2>/dev/null || cache="$HOME/.cache/enroot"
  fi
  base="$ENROOT_DIR/slurm-ab-enroot-$(id -u)"
  if [[ ${data:-} == "$HOME"/* ]]; then export XDG_DATA_HOME="$base/share"; data="$XDG_DATA_HOME/enroot"; fi
  if [[ ${cache:-} == "$HOME"/* ]]; then export XDG_CACHE_HOME="$base/cache"; cache="$XDG_CACHE_HOME/enroot"; fi
  event enroot_paths "data=${data:-site}" "cache=${cache:-site}"
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
  local g active script="$RUN_DIR/$F_SWEEP_SCRIPT" rel line removed=0 failed=0
  local -a pids=()
  (( SWEEP )) && [[ -n "$CT_PREFIX$CACHE_BASE" ]] || return 0
  if ! active=$(active_jobs); then
    log "sweep of ended jobs' containers and caches skipped: squeue did not answer" >&2
    event sweep skipped=squeue
    return 0
  fi
  mkdir -p "$RUN_DIR/$F_PREFLIGHT" || return 0
  { echo '#!/bin/bash'
    declare -p LIST_CMD REMOVE_CMD
    declare -f stale sweep_node
    echo 'sweep_node "$@"'; } >"$script"
  for g in "${!HEADS[@]}"; do
    local ref="R${g}_NODES[@]"; local -a nodes_ref=("${!ref}")
    ( drop_gpu_request
      exec timeout 60 srun --het-group="$g" --nodes="${#nodes_ref[@]}" "${NODE_STEP[@]}" "${SRUN_EXTRA[@]}" \
        --output="$(rpath "$F_SWEEP_LOG" "$g" %t)" bash "$script" "$SLURM_JOB_ID" "$active" "$CT_PREFIX" "$CACHE_BASE" ) &
    pids+=($!)
  done
  wait "${pids[@]}" 2>/dev/null
  # shellcheck disable=SC2059  # a generated format (rundir.Layout); every group and node rank
  printf -v rel "$F_SWEEP_LOG" '*' '*'
  # shellcheck disable=SC2086  # $rel: the glob of every node's log
  while IFS= read -r line; do
    [[ $line == removed* ]] && removed=$(( removed + 1 ))
    [[ $line == failed* ]] && failed=$(( failed + 1 ))
    log "sweep: $line (an ended job's)" >&2
  done < <(cat "$RUN_DIR"/$rel 2>/dev/null | grep -E '^(removed|failed) ' | sort -u)
  event sweep "removed=$removed" "failed=$failed"
}
{% endraw %}
