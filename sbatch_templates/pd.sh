{% raw %}
# ---- prefill/decode (PD) launches (static): roles, bootstrap, KV canaries, pair warm-ups --------
# Included only in jobs with prefill/decode roles. A PD launch's het groups are role instances
# (GROUP_ROLES[g] = prefill | decode). SGLang 0.5.23's servers of both roles answer /health and
# finish their own warm-up with a fake bootstrap host (2.2.2.2: http_server.py), so "every server
# healthy" proves nothing about KV transfer; the job proves it pair by pair before the benchmark.
CANARY_TIMEOUT=${CANARY_TIMEOUT:-60}
PAIR_P=()
PAIR_D=()

# Runs on each node in the preflight (preflight_node, through check.sh): the node's SGLANG_HOST_IP
# (PF_PD_IFACE: the IPv4 address of pd.host_ip_interface here -> F_PREFLIGHT_HOST_IP of the node, which the
# server step exports: SGLang 0.5.23 advertises it for the KV side channel and transfer engine,
# utils/network.py get_local_ip_auto), GPUDirect RDMA (PF_PD_GPUDIRECT: nvidia_peermem loaded or
# dma-buf support, without which Mooncake and UCX cannot register GPU memory and every KV transfer
# fails after the model load), and every RDMA device of pd.ib_device (PF_PD_IB) with an ACTIVE port
# (with mooncake SGLang 0.5.23 refuses a device missing from /sys/class/infiniband at start-up:
# validation_hook.py; an inactive port fails every transfer).
# shellcheck disable=SC2317,SC2154  # runs on the nodes, through check.sh (preflight_node's dir, node)
preflight_pd() {
  local out rc dev name port state found ip peer dmabuf
  local -a devs=()
  if [[ -n "${PF_PD_IFACE:-}" ]]; then
    ip=$("${PF_ADDRESS[@]}" "$PF_PD_IFACE" 2>&1)
    if [[ "$ip" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
      printf '%s\n' "$ip" >"$(rpath "$F_PREFLIGHT_HOST_IP" "$node")"
    else
      problem pd "pd.host_ip_interface=$PF_PD_IFACE: no IPv4 address on this node, so no SGLANG_HOST_IP for its KV transfers: $(head -n 1 <<<"$ip")"
    fi
  fi
  if (( ${#PF_PD_GPUDIRECT[@]} )); then
    out=$("${PF_PD_GPUDIRECT[@]}" 2>&1); rc=$?
    peer=$(awk '$1 == "peermem" {print $2; exit}' <<<"$out")
    dmabuf=$(awk '$1 == "dmabuf" {print $2; exit}' <<<"$out")
    if (( rc != 0 )) || [[ -z "$peer" ]]; then
      problem pd "GPUDirect RDMA check failed (status $rc): $(head -n 1 <<<"$out")"
    elif [[ "$peer" != yes && "$dmabuf" != yes ]]; then
      problem pd "no GPUDirect RDMA: nvidia_peermem is not loaded and dma-buf is ${dmabuf:-unknown}: the RDMA transfer engine cannot register GPU memory, every KV transfer from or to this node would fail (load nvidia_peermem, or a driver and kernel with dma-buf)"
    fi
  fi
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

# host_ip_dir G: the directory whose F_PREFLIGHT_HOST_IP files give group G's nodes their
# SGLANG_HOST_IP (the job's: the preflight wrote them), "" for SGLang's own guess
# (pd.host_ip_interface unset); recorded once per group (pd_host_ip).
host_ip_dir() {
  local g=$1 n f ips="" ref="R${1}_NODES[@]"
  [[ -n "${HOST_IP_IFACE:-}" && ${GROUP_ROLES[g]} != server ]] || return 0
  for n in ${!ref+"${!ref}"}; do
    # shellcheck disable=SC2059  # the format is a generated F_* (rundir.Layout), never data
    printf -v f "%s/$F_PREFLIGHT_HOST_IP" "$CAMPAIGN_DIR" "$n"
    ips+="${ips:+,}$n=$(cat "$f" 2>/dev/null)"
  done
  event pd_host_ip "replica=$g" "interface=$HOST_IP_IFACE" "ips=$ips"
  printf '%s' "$CAMPAIGN_DIR"
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

# pair_file KIND G PEER [K [http]]: the answer of group G to a pair request (canary | warmup) with
# PEER (F_PD_CANARY; K > 0: the pair's K-th DP canary, F_PD_CANARY_DP; F_PD_WARMUP), or with "http"
# its HTTP status and curl's message.
pair_file() {
  local kind=$1 k=${4:-0} fmt
  (( k > 0 )) && [[ $kind == canary ]] && kind=canary_dp
  case $kind:${5:-} in
    canary:) fmt=$F_PD_CANARY ;;
    canary:http) fmt=$F_PD_CANARY_HTTP ;;
    canary_dp:) fmt=$F_PD_CANARY_DP ;;
    canary_dp:http) fmt=$F_PD_CANARY_DP_HTTP ;;
    *:http) fmt=$F_PD_WARMUP_HTTP ;;
    *) fmt=$F_PD_WARMUP ;;
  esac
  if [[ $kind == canary_dp ]]; then rpath "$fmt" "$2" "$3" "$k"; else rpath "$fmt" "$2" "$3"; fi
}

# pd_room: a random bootstrap room (the router draws one per request; 45 bits here).
pd_room() { printf '%d' $(( (RANDOM << 30) | (RANDOM << 15) | RANDOM )); }

# pd_pair KIND P D ROOM TIMEOUT BODY [K PFIELDS DFIELDS]: BODY (a JSON object, or @FILE) to prefill P
# and decode D at once with P's bootstrap fields, as the PD router sends a request ("dual dispatch"),
# PFIELDS / DFIELDS (JSON members, each ending in ",") added to the prefill's / the decode's; each
# answer goes to pair_file KIND G PEER K (+ its http file: status and curl's message). Sets PAIR_P=(rc http)
# and PAIR_D=(rc http).
pd_pair() {
  local kind=$1 p=$2 d=$3 room=$4 timeout=$5 body=$6 k=${7:-0} pfields=${8:-} dfields=${9:-} g peer out rc extra
  local -A curls=()
  for g in "$p" "$d"; do
    peer=$(( g == p ? d : p ))
    out=$(pair_file "$kind" "$g" "$peer" "$k")
    extra=$dfields
    (( g == p )) && extra=$pfields
    { printf '{"bootstrap_host":"%s","bootstrap_port":%d,"bootstrap_room":%s,%s' "${ADDRS[p]}" "${BOOT_PORTS[p]}" "$room" "$extra"
      if [[ $body == @* ]]; then tail -c +2 -- "${body#@}"; else printf '%s' "${body#\{}"; fi
    } | curl -sS -m "$timeout" -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary @- "http://${ADDRS[g]}:${PORTS[g]}/generate" >"$(pair_file "$kind" "$g" "$peer" "$k" http)" 2>&1 &
    curls[$g]=$!
  done
  for g in "$p" "$d"; do
    watch_pid "${curls[$g]}"
    rc=$?
    out=$(pair_file "$kind" "$g" "$(( g == p ? d : p ))" "$k" http)
    if (( g == p )); then PAIR_P=("$rc" "$(head -c 3 "$out" 2>/dev/null)"); else PAIR_D=("$rc" "$(head -c 3 "$out" 2>/dev/null)"); fi
  done
}

# pd_pair_failed KIND P D SECONDS WHAT [K DPFIELDS...]: stop the launch naming the pair (and its DP
# ranks), with what each side answered; a decode that said "KV checksum mismatch" is named so.
pd_pair_failed() {
  local kind=$1 p=$2 d=$3 seconds=$4 what=$5 k=${6:-0} sum=""
  local -a dpf=("${@:7}")
  grep -q "KV checksum mismatch" "$(pair_file "$kind" "$d" "$p" "$k")" 2>/dev/null && sum=mismatch
  tail_log "$(pair_file "$kind" "$p" "$d" "$k")" "$(pair_file "$kind" "$d" "$p" "$k")" \
    "$(rpath "$F_SERVER_LOG" "$p" 0)" "$(rpath "$F_SERVER_LOG" "$d" 0)"
  fatal "pd_$kind" "prefill=$p" "decode=$d" "prefill_node=${HEADS[p]}" "decode_node=${HEADS[d]}" ${dpf[@]+"${dpf[@]}"} \
    "http_prefill=${PAIR_P[1]:-none}" "http_decode=${PAIR_D[1]:-none}" "curl_prefill=${PAIR_P[0]}" "curl_decode=${PAIR_D[0]}" "seconds=$seconds" \
    ${sum:+"kv_checksum=$sum"} \
    "$what between $(group_name "$p") (${HEADS[p]}) and $(group_name "$d") (${HEADS[d]})${dpf[*]:+ (${dpf[*]})} failed after $seconds s: prefill HTTP ${PAIR_P[1]:-none} (curl $((PAIR_P[0]))), decode HTTP ${PAIR_D[1]:-none} (curl $((PAIR_D[0])))${sum:+: KV checksum mismatch}"
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

# KV canary of every pair and DP rank: a 2-token generation whose KV the prefill computes and the
# decode receives; the decode must return both tokens (a run whose transfers all failed has shown
# clients "success" with 0 tokens: NVIDIA/srt-slurm#429). A role with DP workers (MODE_DP_<i>: DP
# attention's ranks, each on its own GPUs and nodes) gets one canary per rank, as SGLang's router
# reaches them with routed_dp_rank (0.5.23 io_struct.py; data_parallel_rank is its deprecated alias):
# canary K goes to prefill DP rank K % DPp (routed_dp_rank, and a bootstrap room of that rank, which
# follow_bootstrap_room also picks) and decode DP rank K % DPd (routed_dp_rank, and
# disagg_prefill_dp_rank naming the prefill's). Fails naming the pair and the ranks within
# CANARY_TIMEOUT s; with pd.kv_checksum the decode verifies the KV it received.
pd_canaries() {
  local p d k n dpp dpd start ok body pf df
  local ref="MODE_DP_${MODE_INDEX}[@]"
  local -a dps=(${!ref+"${!ref}"})
  body="{\"input_ids\":[$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID,$WARMUP_TOKEN_ID],\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0,\"ignore_eos\":true},\"stream\":false}"
  while read -r p d; do
    dpp=${dps[p]:-1} dpd=${dps[d]:-1}
    n=$(( dpp > dpd ? dpp : dpd ))
    for (( k = 0; k < n; k++ )); do
      start=$SECONDS
      pf="" df=""
      (( dpp > 1 )) && pf="\"routed_dp_rank\":$(( k % dpp )),"
      (( dpd > 1 )) && df="\"routed_dp_rank\":$(( k % dpd )),"
      (( dpp > 1 )) && df+="\"disagg_prefill_dp_rank\":$(( k % dpp )),"
      local -a dpf=()
      (( n > 1 )) && dpf=("prefill_dp=$(( k % dpp ))" "decode_dp=$(( k % dpd ))")
      event pd_canary_start "prefill=$p" "decode=$d" ${dpf[@]+"${dpf[@]}"}
      pd_pair canary "$p" "$d" "$(( $(pd_room) / dpp * dpp + k % dpp ))" "$CANARY_TIMEOUT" "$body" "$k" "$pf" "$df"
      ok=0
      if (( PAIR_P[0] == 0 && PAIR_D[0] == 0 )) && [[ ${PAIR_P[1]} == 200 && ${PAIR_D[1]} == 200 ]] \
        && grep -Eq '"completion_tokens": *2\b' "$(pair_file canary "$d" "$p" "$k")"; then ok=1; fi
      event pd_canary "prefill=$p" "decode=$d" ${dpf[@]+"${dpf[@]}"} "ok=$ok" "http_prefill=${PAIR_P[1]:-none}" "http_decode=${PAIR_D[1]:-none}" "seconds=$(( SECONDS - start ))"
      if (( ! ok )); then
        alive_or_die
        pd_pair_failed canary "$p" "$d" "$(( SECONDS - start ))" "KV canary (2 tokens)" "$k" ${dpf[@]+"${dpf[@]}"}
      fi
      log "KV canary $(group_name "$p") -> $(group_name "$d")${dpf[*]:+ (${dpf[*]})} ok after $(( SECONDS - start )) s"
    done
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
