{% raw %}
# ---- profiles (static; a job with a profiled pass or nsys) ---------------------------------------
# A profiled pass (LAUNCH_PASSES' 8th field) asks every head of the launch for SGLang's profile as
# it starts (POST /start_profile: its role's step window PROFILE_BODY_<mode>_<role>, the pass's
# F_PROFILE_DIR as output_dir, the pass key as profile_id, r<G> as profile_prefix so two instances'
# ranks do not share a name) and stops it when the pass ends (POST /stop_profile: SGLang answers
# 500 when num_steps already ended it). Every GPU rank writes its own trace there. The answers go
# to F_PROFILE_ANSWER, their statuses to events.log (profile_start / profile_stop).

# profile_request start|stop: to every head of the running launch.
profile_request() {
  local what=$1 g var base out code dir body
  dir=$(rpath "$F_PROFILE_DIR" "$PASS_KEY")
  mkdir -p "$dir" || return 0
  for g in "${!HEADS[@]}"; do
    out=$(rpath "$F_PROFILE_ANSWER" "$PASS_KEY" "$what" "$g")
    body='{}'
    if [[ $what == start ]]; then
      var="PROFILE_BODY_${MODE_INDEX}_${GROUP_ROLES[g]}"
      base=${!var}
      body="{\"output_dir\": $(json_str "$dir"), \"profile_id\": $(json_str "$PASS_KEY"), \"profile_prefix\": $(json_str "r$g"), ${base#\{}"
    fi
    # the status first, then curl's message (if any), which the answer file keeps as evidence
    code=$(curl -sS -m 60 -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$body" \
      "http://${ADDRS[g]}:${PORTS[g]}/${what}_profile" 2>&1)
    (( ${#code} > 3 )) && printf '%s\n' "${code:3}" >>"$out"
    code=${code:0:3}
    log "pass $PASS_KEY: /${what}_profile of $(group_name "$g"): HTTP ${code:-none}"
    event "profile_$what" "pass=$PASS_KEY" "replica=$g" "http=${code:-000}"
  done
}

# nsys_wrap G: nsys (NSYS) in front of the program of start_servers' `cmd` (after its environment
# words), its report per node (F_NSYS_REPORT; nsys expands %q{SLURM_NODEID} on the node).
nsys_wrap() {
  local g=$1 i=0
  (( ${#NSYS[@]} )) || return 0
  mkdir -p "$RUN_DIR/$F_PROFILES" || return 0
  while (( i < ${#cmd[@]} )) && [[ ${cmd[i]} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do i=$(( i + 1 )); done
  cmd=("${cmd[@]:0:i}" "${NSYS[@]}" -o "$(rpath "$F_NSYS_REPORT" "$g" '%q{SLURM_NODEID}')" "${cmd[@]:i}")
}
{% endraw %}
