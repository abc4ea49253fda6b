{% raw %}
# ---- prefill/decode (PD) launches (static): roles, bootstrap, KV canaries, pair warm-ups --------
# Included only in jobs with prefill/decode roles. A PD launch's het groups are role instances
# (GROUP_ROLES[g] = prefill | decode). SGLang 0.5.23's servers of both roles answer /health and
# finish their own warm-up with a fake bootstrap host (2.2.2.2: http_server.py), so "every server
# healthy" proves nothing about KV transfer; the job proves it pair by pair before the benchmark.
CANARY_TIMEOUT=${CANARY_TIMEOUT:-60}
PAIR_P=()
PAIR_D=()

# Runs on each node in the preflight (preflight_node, through check.sh): every RDMA device of
# pd.ib_device (PF_PD_IB) has an ACTIVE port. With mooncake, SGLang 0.5.23 refuses a device missing
# from /sys/class/infiniband at start-up (validation_hook.py); an inactive port fails every transfer.
# shellcheck disable=SC2317  # runs on the nodes, through check.sh
preflight_pd() {
  local out rc dev name port state found
  local -a devs=()
  [[ -n "${PF_PD_IB:-}" && ${#PF_HCA[@]} -gt 0 ]] || return 0
  out=$("${PF_HCA[@]}" 2>&1); rc=$?
  if (( rc != 0 )); then
    problem pd "RDMA device listing failed (status $rc): $(head -n 1 <<<"$out")"
    return 0
  fi
  IFS=, read -ra devs <<<"$PF_PD_IB"
  for dev in "${devs[@]}"; do
    found=""
    while read -r name port state; do
      [[ -n "$port" && $name == "$dev" ]] || continue
      [[ $state == *ACTIVE* ]] && found=active
      found=${found:-inactive}
    done <<<"$out"
    case $found in
      "") problem pd "pd.ib_device=$PF_PD_IB: no RDMA device $dev here (devices: $(awk '{print $1}' <<<"$out" | sort -u | paste -sd, -)): SGLang refuses it at start-up" ;;
      inactive) problem pd "pd.ib_device=$PF_PD_IB: $dev has no ACTIVE port: every KV transfer through it would fail" ;;
    esac
  done
}

# json_value NAME: the first scalar "NAME": value of the JSON on stdin, quotes stripped ("" if none).
json_value() {
  grep -Eo "\"$1\": *(\"[^\"]*\"|[^,}[:space:]]+)" | head -n 1 | sed -E 's/^[^:]*: *"?//; s/"$//'
}

# The roles as the servers see themselves: each head's /server_info (its server args:
# disaggregation_mode, page_size, kv_cache_dtype). Neither router profile checks a worker's own
# role: a server started as the other role (an image default, a wrapper) would be paired anyway;
# and SGLang compares page size and KV dtype only at the first handshake, where the decode dies.
pd_check_roles() {
  local g info role page dtype ref="" rg rpage rdtype
  for g in "${!HEADS[@]}"; do
    info=$(curl -fsS -m 10 "http://${ADDRS[g]}:${PORTS[g]}/server_info" 2>/dev/null)
    role=$(json_value disaggregation_mode <<<"$info")
    page=$(json_value page_size <<<"$info")
    dtype=$(json_value kv_cache_dtype <<<"$info")
    event pd_role "replica=$g" "role=${GROUP_ROLES[g]}" "server_role=${role:-unknown}" "page_size=${page:-unknown}" "kv_cache_dtype=${dtype:-unknown}"
    if [[ -n "$role" && "$role" != "${GROUP_ROLES[g]}" ]]; then
      tail_log "$(rpath "$F_SERVER_LOG" "$g" 0)"
      fatal pd_role "replica=$g" "role=${GROUP_ROLES[g]}" "server_role=$role" "node=${HEADS[g]}" \
        "$(group_name "$g") (${HEADS[g]}) runs --disaggregation-mode $role, not ${GROUP_ROLES[g]}: the router would pair it as a ${GROUP_ROLES[g]} (its /server_info)"
    fi
    [[ -n "$page$dtype" ]] || continue
    if [[ -z "$ref" ]]; then ref="$g|$page|$dtype"; continue; fi
    IFS='|' read -r rg rpage rdtype <<<"$ref"
    if [[ "$page" != "$rpage" || "$dtype" != "$rdtype" ]]; then
      fatal pd_mismatch "replica=$g" "other=$rg" "page_size=$page" "other_page_size=$rpage" "kv_cache_dtype=$dtype" "other_kv_cache_dtype=$rdtype" \
        "$(group_name "$g") (${HEADS[g]}) runs page_size=$page kv_cache_dtype=$dtype, $(group_name "$rg") (${HEADS[rg]}) page_size=$rpage kv_cache_dtype=$rdtype: SGLang refuses the pair at its first handshake"
    fi
  done
}

# Every prefill instance's bootstrap server knows all its ranks: GET /route with the -1 wildcards
# answers 503 "Prefill server not fully registered yet (K workers registered)." until every rank of
# every node registered (disaggregation/common/conn.py), 200 with the instance's layout then.
pd_wait_bootstrap() {
  local start=$SECONDS g out code
  local -A ok=()
  local -a pending
  while :; do
    pending=()
    for g in "${!HEADS[@]}"; do
      [[ ${GROUP_ROLES[g]} == prefill && -z "${ok[$g]:-}" ]] || continue
      out=$(curl -sS -m 5 -w '\n%{http_code}' "http://${ADDRS[g]}:${BOOT_PORTS[g]}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1" 2>&1)
      code=${out##*$'\n'}
      if [[ "$code" == 200 ]]; then
        ok[$g]=1
        event pd_bootstrap "replica=$g" ok=1 "port=${BOOT_PORTS[g]}" "seconds=$(( SECONDS - start ))"
      else
        pending+=("$g")
      fi
    done
    (( ${#pending[@]} == 0 )) && return 0
    alive_or_die
    if (( SECONDS - start >= READY_TIMEOUT )); then
      g=${pending[0]}
      tail_log "$(rpath "$F_SERVER_LOG" "$g" 0)"
      fatal pd_bootstrap "replica=$g" "node=${HEADS[g]}" "port=${BOOT_PORTS[g]}" \
        "$(group_name "$g")'s bootstrap server ${ADDRS[g]}:${BOOT_PORTS[g]} has not registered every rank after $READY_TIMEOUT s (last answer: $(tr '\n' ' ' <<<"${out%$'\n'*}" | head -c 200))"
    fi
    nap
  done
}

# pair_file KIND G PEER [http]: the answer of group G to a pair request (canary | warmup) with PEER
# (F_PD_CANARY, F_PD_WARMUP), or its HTTP status and curl's message.
pair_file() {
  local fmt
  case $1:${4:-} in
    canary:) fmt=$F_PD_CANARY ;;
    canary:http) fmt=$F_PD_CANARY_HTTP ;;
    *:http) fmt=$F_PD_WARMUP_HTTP ;;
    *) fmt=$F_PD_WARMUP ;;
  esac
  rpath "$fmt" "$2" "$3"
}

# pd_room: a random bootstrap room (the router draws one per request; 45 bits here).
pd_room() { printf '%d' $(( (RANDOM << 30) | (RANDOM << 15) | RANDOM )); }

# pd_pair KIND P D ROOM TIMEOUT BODY: BODY (a JSON object, or @FILE) to prefill P and decode D at once
# with P's bootstrap fields, as the PD router sends a request ("dual dispatch"); each answer goes to
# pair_file KIND G PEER (+ its http file: status and curl's message). Sets PAIR_P=(rc http)
# and PAIR_D=(rc http).
pd_pair() {
  local kind=$1 p=$2 d=$3 room=$4 timeout=$5 body=$6 g peer out rc
  local -A curls=()
  for g in "$p" "$d"; do
    peer=$(( g == p ? d : p ))
    out=$(pair_file "$kind" "$g" "$peer")
    { printf '{"bootstrap_host":"%s","bootstrap_port":%d,"bootstrap_room":%s,' "${ADDRS[p]}" "${BOOT_PORTS[p]}" "$room"
      if [[ $body == @* ]]; then tail -c +2 -- "${body#@}"; else printf '%s' "${body#\{}"; fi
    } | curl -sS -m "$timeout" -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary @- "http://${ADDRS[g]}:${PORTS[g]}/generate" >"$(pair_file "$kind" "$g" "$peer" http)" 2>&1 &
    curls[$g]=$!
  done
  for g in "$p" "$d"; do
    watch_pid "${curls[$g]}"
    rc=$?
    out=$(pair_file "$kind" "$g" "$(( g == p ? d : p ))" http)
    if (( g == p )); then PAIR_P=("$rc" "$(head -c 3 "$out" 2>/dev/null)"); else PAIR_D=("$rc" "$(head -c 3 "$out" 2>/dev/null)"); fi
  done
}

# pd_pair_failed KIND P D SECONDS WHAT: stop the launch naming the pair, with what each side answered.
pd_pair_failed() {
  local kind=$1 p=$2 d=$3 seconds=$4 what=$5
  tail_log "$(pair_file "$kind" "$p" "$d")" "$(pair_file "$kind" "$d" "$p")" \
    "$(rpath "$F_SERVER_LOG" "$p" 0)" "$(rpath "$F_SERVER_LOG" "$d" 0)"
  fatal "pd_$kind" "prefill=$p" "decode=$d" "prefill_node=${HEADS[p]}" "decode_node=${HEADS[d]}" \
    "http_prefill=${PAIR_P[1]:-none}" "http_decode=${PAIR_D[1]:-none}" "curl_prefill=${PAIR_P[0]}" "curl_decode=${PAIR_D[0]}" "seconds=$seconds" \
    "$what between $(group_name "$p") (${HEADS[p]}) and $(group_name "$d") (${HEADS[d]}) failed after $seconds s: prefill HTTP ${PAIR_P[1]:-none} (curl $((PAIR_P[0]))), decode HTTP ${PAIR_D[1]:-none} (curl $((PAIR_D[0])))"
}

# The prefill/decode pairs of this launch, "P D" per line (every prefill with every decode).
pd_pairs() {
  local p d
  for p in "${!GROUP_ROLES[@]}"; do
    [[ ${GROUP_ROLES[p]} == prefill ]] || continue
    for d in "${!GROUP_ROLES[@]}"; do
      [[ ${GROUP_ROLES[d]} == decode ]] && printf '%d %d\n' "$p" "$d"
    done
  done
}

# KV canary of every pair: a 2-token generation whose KV the prefill computes and the decode
# receives; the decode must return both tokens (a run whose transfers all failed has shown clients
# "success" with 0 tokens: NVIDIA/srt-slurm#429). Fails naming the pair within CANARY_TIMEOUT s.
pd_canaries() {
  local p d start ok body
  body="{\"input_ids\":[$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID],\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0,\"ignore_eos\":true},\"stream\":false}"
  while read -r p d; do
    start=$SECONDS
    event pd_canary_start "prefill=$p" "decode=$d"
    pd_pair canary "$p" "$d" "$(pd_room)" "$CANARY_TIMEOUT" "$body"
    ok=0
    if (( PAIR_P[0] == 0 && PAIR_D[0] == 0 )) && [[ ${PAIR_P[1]} == 200 && ${PAIR_D[1]} == 200 ]] \
      && grep -Eq '"completion_tokens": *2\b' "$(pair_file canary "$d" "$p")"; then ok=1; fi
    event pd_canary "prefill=$p" "decode=$d" "ok=$ok" "http_prefill=${PAIR_P[1]:-none}" "http_decode=${PAIR_D[1]:-none}" "seconds=$(( SECONDS - start ))"
    if (( ! ok )); then
      alive_or_die
      pd_pair_failed canary "$p" "$d" "$(( SECONDS - start ))" "KV canary (2 tokens)"
    fi
    log "KV canary $(group_name "$p") -> $(group_name "$d") ok after $(( SECONDS - start )) s"
  done < <(pd_pairs)
}

# The warm-up of a PD launch: the seed's 16K -> 1 request once per pair, sent to both as the router
# would: every prefill computes a 16K prompt (its first-prefill workspace) and every pair moves its
# KV. Through the router, round_robin on both roles reaches every pair only when gcd(P, D) = 1.
pd_warmups() {
  local p d g ok
  while read -r p d; do
    log "pair $(group_name "$p") -> $(group_name "$d"): warm-up ${WARMUP_INPUT_LEN} -> ${WARMUP_OUTPUT_LEN} tokens"
    event warmup_start "replica=$p" "pair=$p,$d"
    event warmup_start "replica=$d" "pair=$p,$d"
    pd_pair warmup "$p" "$d" "$(pd_room)" "$WARMUP_TIMEOUT" "@$WARMUP_BODY"
    ok=1
    if (( PAIR_P[0] != 0 || PAIR_D[0] != 0 )) || [[ ${PAIR_P[1]} != 200 || ${PAIR_D[1]} != 200 ]]; then ok=0; fi
    for g in "$p" "$d"; do
      grep -Eq "\"prompt_tokens\": *$WARMUP_INPUT_LEN\b" "$(pair_file warmup "$g" "$(( g == p ? d : p ))")" || ok=0
    done
    if (( ! ok )); then
      event warmup_done "replica=$p" "pair=$p,$d" ok=0 "http=${PAIR_P[1]:-none}" "curl_rc=${PAIR_P[0]}"
      event warmup_done "replica=$d" "pair=$p,$d" ok=0 "http=${PAIR_D[1]:-none}" "curl_rc=${PAIR_D[0]}"
      alive_or_die
      pd_pair_failed warmup "$p" "$d" "?" "warm-up ${WARMUP_INPUT_LEN} -> ${WARMUP_OUTPUT_LEN}"
    fi
    event warmup_done "replica=$p" "pair=$p,$d" ok=1 http=200 "prompt_tokens=$WARMUP_INPUT_LEN"
    event warmup_done "replica=$d" "pair=$p,$d" ok=1 http=200 "prompt_tokens=$WARMUP_INPUT_LEN"
  done < <(pd_pairs)
}

# One generation through the router once it is ready: its PD path (bootstrap injection, both
# roles' URLs as it registered them) works, before the benchmark relies on it.
pd_router_canary() {
  local start=$SECONDS out="$RUN_DIR/$F_ROUTER_CANARY" http="$RUN_DIR/$F_ROUTER_CANARY_HTTP" code rc
  curl -sS -m "$CANARY_TIMEOUT" -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "{\"input_ids\":[$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID],\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0,\"ignore_eos\":true},\"stream\":false}" \
    "http://$ROUTER_ADDR:$ROUTER_PORT/generate" >"$http" 2>&1 &
  watch_pid $!
  rc=$?
  code=$(head -c 3 "$http" 2>/dev/null)
  if (( rc == 0 )) && [[ "$code" == 200 ]] && grep -Eq '"completion_tokens": *2\b' "$out"; then
    event pd_canary via=router ok=1 http=200 "seconds=$(( SECONDS - start ))"
    return 0
  fi
  event pd_canary via=router ok=0 "http=${code:-none}" "curl_rc=$rc" "seconds=$(( SECONDS - start ))"
  tail_log "$out" "$RUN_DIR/$F_ROUTER_LOG"
  fatal pd_canary via=router "http=${code:-none}" "curl_rc=$rc" \
    "a 2-token generation through the router failed after $(( SECONDS - start )) s (HTTP ${code:-none}, curl $rc): the router's PD path does not work"
}

# The servers of a PD launch are up: prove the roles, the bootstrap servers and every
# pair's KV transfer, then warm every pair up (in that order: each step fails faster than the next).
pd_ready() {
  pd_check_roles
  pd_wait_bootstrap
  pd_canaries
  pd_warmups
}
{% endraw %}
