{% raw %}
# ---- telemetry (static; a job with telemetry.source "nvidia-smi" or "dcgm") ---------------------
# Every node of a launch runs a GPU sampler step from its servers' start to the launch's teardown
# (nvidia-smi in query mode, or a loop scraping the node's DCGM exporter, which the step may start
# first), ROUTER_HOST a host sampler (/proc: the node's CPU, memory and open files, and the job's
# busiest processes). Output: the launch's F_GPU_SAMPLES per node, F_HOST_SAMPLES; each GPU file
# opens with a '# slurm-ab telemetry' line (node, epoch, UTC offset: nvidia-smi's timestamps are
# local time). A sampler that fails costs the telemetry, never the launch: its steps are not
# critical (SAMPLER_PIDS, not STEP_PIDS) and the teardown ends them with the others.

# The node side of a GPU sampler step: STOP_FILE N EXPORTER_WORDS(N) SAMPLER_WORDS... A sampler has
# no peer to lose: on a node whose slurmd died (the job ends NODE_FAIL; no step signal reaches the
# node) it would sample until the node reboots. It also ends when the launch's teardown writes
# STOP_FILE (F_SAMPLERS_STOP, on the shared run directory), polled once a second.
# shellcheck disable=SC2016  # expands on the node
SAMPLER_NODE='export LC_ALL=C; stop=$1 n=$2; shift 2; exporter=("${@:1:n}"); shift "$n"
printf "# slurm-ab telemetry node=%s epoch=%s tz=%s\n" "${SLURMD_NODENAME:-$(hostname)}" "$(date +%s.%N)" "$(date +%z)"
pids=()
if (( n )); then "${exporter[@]}" >/dev/null 2>&1 & pids+=($!); fi
"$@" & s=$!; pids+=("$s")
while kill -0 "$s" 2>/dev/null; do
  if [[ -e $stop ]]; then kill "${pids[@]}" 2>/dev/null; break; fi
  sleep 1
done
wait "$s"'

# start_samplers: one GPU sampler step per het group of the running launch (a task per node, its
# file per node rank), then the host sampler on ROUTER_HOST.
start_samplers() {
  local g ref
  mkdir -p "$RUN_DIR/$F_TELEMETRY" || return 0
  for g in "${!HEADS[@]}"; do
    ref="R${g}_NODES[@]"
    local -a nodes=("${!ref}")
    in_image "$g" SERVER_ENV             # the group's container (its servers' name, when named) or image
    srun --het-group="$g" --nodes="${#nodes[@]}" --ntasks-per-node=1 "${TELEMETRY_STEP[@]}" \
      --output="$(rpath "$F_GPU_SAMPLES" "$g" %t)" "${CT[@]}" "${SRUN_EXTRA[@]}" \
      "${IN_IMAGE[@]}" bash -c "$SAMPLER_NODE" "sampler-r$g" "$RUN_DIR/$F_SAMPLERS_STOP" "${#TELEMETRY_EXPORTER[@]}" \
      "${TELEMETRY_EXPORTER[@]}" "${TELEMETRY_GPU[@]}" &
    SAMPLER_PIDS+=($!)
  done
  if (( ${#TELEMETRY_HOST[@]} )); then
    in_image 0 COMMON_ENV
    side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}" --output="$RUN_DIR/$F_HOST_SAMPLES" \
      "${CT[@]}" "${SRUN_EXTRA[@]}" env "${STEP_ENV[@]}" "${TELEMETRY_HOST[@]}" &
    SAMPLER_PIDS+=($!)
  fi
  event telemetry_start "source=$TELEMETRY_SOURCE" "samplers=${#SAMPLER_PIDS[@]}"
}
{% endraw %}
