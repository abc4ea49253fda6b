#!/usr/bin/env bash
# slurm-ab local test cluster: a real multi-node Slurm (one slurmd per emulated node, Debian's
# --enable-multiple-slurmd build) with real accounting (slurmdbd + MariaDB) on ONE machine.
#
# Usage: cluster.sh install | up | down [--purge] | status | env | link NODE up|down
#                   | rate NODE RATE|off | names plain|ib [NODE...] | block FROM TO PORT
#                   | block FROM off | heal NODE...
#
#   install   apt-get the packages, shellcheck included (skips what is installed; never starts the
#             distro services)
#   up        write configs, start munged, mariadb, slurmdbd, slurmctld, N x slurmd; wait until
#             every node is idle and sacct answers. Idempotent: on a running cluster it only checks.
#             Leftovers of an interrupted earlier run (namespaces, links, hosts lines) are removed.
#   down      cancel jobs, stop the daemons WE started (pid files only), remove the node network
#             (namespaces, links, bridge) and the /etc/hosts lines; keep the state dir (logs, DB,
#             job-id counter) unless --purge.
#   status    network layout, daemons up/down with pids, sinfo, the SLURM_CONF export line;
#             non-zero if anything is down
#   env       print `export SLURM_CONF=...` (for eval)
#   link      (netns layout) a node's link down/up, inside its namespace (a network partition)
#   rate      (netns layout) rate-limit a node's outgoing traffic with tbf (e.g. 400kbit), or off
#   names     (netns layout) /etc/hosts gives the nodes' addresses as nodeNN (plain) or only as
#             nodeNN-ib (ib: the Slurm name is not an address; Slurm itself uses NodeAddr IPs)
#   block     (netns layout) block FROM TO PORT: FROM's TCP connections to TO's address and PORT
#             fail ("No route to host"; a policy route inside FROM's namespace); block FROM off
#   names ib NODE...: only those nodes (the other jobs' nodes keep their names)
#   heal      heal NODE...: undo link, rate and block on those nodes, restart their slurmd if it
#             died, resume them (a test's repair that leaves other tests' faults alone)
#   (`up` on a running netns cluster undoes link, rate and block everywhere; names is reset by a
#   fresh up)
#
# Environment:
#   SLURM_AB_CLUSTER_DIR      all state (default /var/lib/slurm-ab-cluster)
#   SLURM_AB_CLUSTER_NODES    number of emulated nodes (default: as at the last `up`, else 9); every
#                             9 of them also form a partition laneN (the tests run one per worker;
#                             `make cluster-up` asks for 27). A running cluster keeps its count.
#   SLURM_AB_CLUSTER_TIMEOUT  seconds to wait for each daemon (default 60)
#   SLURM_AB_CLUSTER_NET      node network layout for `up`: auto (default: netns where network
#                             namespaces can be created, else localhost) | netns | localhost
#
# Network layouts:
#   netns      every node has its own network namespace (sab-nodeNN) and UTS namespace (hostname
#              nodeNN), one veth (eth0, 10.77.0.(10+N)/24) on a private bridge (sabbr0, 10.77.0.1)
#              and no default route; slurmctld, slurmdbd, MariaDB and munged stay on the host side
#              (munge through its socket file). Each slurmd runs inside its node's namespace, so
#              every step and every process of a job lives in its node's network. BEFORE anything
#              else, `up` installs `unreachable 10.77.0.0/24 metric 4000`: if the bridge or its
#              route goes away, packets for a test address fail at once instead of following the
#              default route off the machine. Link faults are applied inside the node's namespace,
#              never by removing the bridge's route. `down` keeps the unreachable route (it only
#              ever refuses traffic); `down --purge` removes it too.
#   localhost  every node is 127.0.0.1 and shares one port space (the fallback).
#
# Traps (learned the hard way, keep in mind when editing):
#   * Never install slurm-wlm-emulator: it flips the slurmd/slurmctld/slurmstepd alternatives to
#     --enable-front-end builds ("fatal: No front end nodes defined"). We always run the explicit
#     *-wlm binaries (through $D/bin symlinks, see ensure_bin_links) and give slurmd an explicit
#     `-d` stepd (otherwise slurmd execs /usr/sbin/slurmstepd, whatever the alternative points to).
#   * The daemons must see argv[0] basename slurmctld/slurmd/slurmstepd (ensure_bin_links): run as
#     "slurmctld-wlm", slurmctld segfaults on its first message to slurmdbd.
#   * Het jobs are scheduled ONLY by the backfill scheduler: bf_interval defaults to 30 s, so a het
#     job waits ~25 s unless SchedulerParameters=bf_interval=1.
#   * apt-get install of mariadb-server/munge/slurm* runs their init scripts; without a
#     policy-rc.d a system mariadbd (port 3306, /run/mysqld) and munged get started behind our back.
#     `install` drops a temporary policy-rc.d that forbids starts.
#   * MariaDB is started with --no-defaults (the distro my.cnf points at /run/mysqld) on its own
#     port; slurmdbd.conf has no socket option, so slurmdbd reaches it over TCP 127.0.0.1:$DB_PORT
#     with a password user (root@localhost is unix_socket-auth only).
#   * slurmdbd reads slurmdbd.conf from the directory of $SLURM_CONF, refuses it unless it is
#     mode 600 and owned by SlurmUser; slurmctld/slurmd read gres.conf/cgroup.conf from there too.
#   * Keep the ctld state dir and the accounting DB together: wiping only StateSaveLocation restarts
#     job ids at 1 and sacct then mixes old and new jobs with the same id (down --purge wipes both).
#   * munged refuses to run as root (without --force) and needs /run/munge (absent on a fresh
#     machine, /run is a tmpfs); it is started as the munge user.
#   * /etc/hosts may be a bind mount: edit it in place (cat > /etc/hosts), never rename over it.
#   * localhost layout: every node is 127.0.0.1, jobs must derive distinct ports per node/replica.
#   * netns layout: slurmd is started with nsenter --net + unshare --uts, not `ip netns exec`:
#     that one remounts /sys in a new mount namespace, hiding /sys/fs/cgroup from slurmd.
#     Deleting a namespace frees its veth asynchronously: `down` deletes the host-side veth first
#     (that removes both ends) and polls until the links are gone.
#     This kernel has no netem (and no fq_codel) qdisc: delay/loss are not available, tbf is.
#   * slurmd restarts do not kill running steps (slurmstepd survives), so `down` cancels jobs first.
#   * proctrack/linuxproc tracks processes by parent pid: a step's process that double-forks and
#     re-parents to init escapes scancel.
#   * GPU GRES without File= is silently dropped by 22.05 (node goes INVAL "gres/gpu count reported
#     lower than configured"); see ensure_fake_gpus. Steps then see CUDA_VISIBLE_DEVICES=0..7.
#   * Daemons are re-parented to PID 1, which here reaps late: a stopped daemon lingers ~2 s as a
#     zombie, so "is it still running" must ignore zombies (see running()).
#   * For users of the cluster: accounting reaches slurmdbd asynchronously. Right after a het job
#     ends sacct may for ~1 s show a single "ID allocation" record instead of ID+0/ID+1: poll.
#     Batch jobs hit by a node failure are requeued (JobRequeue default 1; sacct shows NODE_FAIL,
#     then the job runs again): submit with --no-requeue where a rerun is unwanted.
#     --signal=B:SIG@N can arrive up to ~60 s earlier than N before the limit (Slurm checks time
#     limits about every 30 s); a TIMEOUT kill likewise lands up to ~30 s after the limit.
set -euo pipefail

D="${SLURM_AB_CLUSTER_DIR:-/var/lib/slurm-ab-cluster}"
TIMEOUT="${SLURM_AB_CLUSTER_TIMEOUT:-60}"
CLUSTER_NAME=slurmab
CTLD_PORT=6817
DBD_PORT=6819
DB_PORT=3316          # private MariaDB port (3306 may be taken by a system MySQL, e.g. on CI runners)
NODE_PORT_BASE=17000  # nodeNN listens on NODE_PORT_BASE+NN
NODE_CPUS=8           # declared CPUs per emulated node (config_overrides: host has fewer)
NODE_MEM_MB=8000
NODE_GPUS=8           # fake GPU GRES per node (File= symlinks to /dev/null)
HOSTS_MARK="# slurm-ab-cluster"
NET_REQ="${SLURM_AB_CLUSTER_NET:-auto}"
# netns layout (see the header). Names are short: interface names have at most 15 characters.
# The SLURM_AB_CLUSTER_{NS,BRIDGE,VETH,NET}_* overrides exist for trying the plumbing on a
# throwaway copy next to a running cluster.
NS_PREFIX=${SLURM_AB_CLUSTER_NS_PREFIX:-sab-}         # nodeNN's namespace: sab-nodeNN
BRIDGE=${SLURM_AB_CLUSTER_BRIDGE:-sabbr0}
VETH_PREFIX=${SLURM_AB_CLUSTER_VETH_PREFIX:-sabv}     # host side of nodeNN's veth: sabvNN (node side: eth0)
NET_PREFIX=${SLURM_AB_CLUSTER_NET_PREFIX:-10.77.0}    # a /24 of private addresses nothing else here uses
SUBNET=$NET_PREFIX.0/24
HOST_ADDR=$NET_PREFIX.1   # slurmctld, slurmdbd (the bridge's address on the host side)
NODE_ADDR_BASE=10     # nodeNN is $NET_PREFIX.(10+N)
FALLBACK_METRIC=4000
# (shellcheck: the tests lint every generated job script; iproute2: ip and tc for the netns layout)
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server shellcheck iproute2)

ETC="$D/etc"; RUN="$D/run"; LOG="$D/log"; DBDIR="$D/mysql"; MUNGE_DIR="$D/munge"
CONF="$ETC/slurm.conf"
NODES_FILE="$ETC/nodes"     # the node count the cluster was last started with
# The node count: SLURM_AB_CLUSTER_NODES, else the count of the last `up` (so that a later `up`, a
# repair or `heal`, never shrinks a grown cluster), else 9.
NNODES="${SLURM_AB_CLUSTER_NODES:-$(cat "$NODES_FILE" 2>/dev/null || echo 9)}"
[[ $NNODES =~ ^[1-9][0-9]?$ ]] || { echo "cluster: ERROR: SLURM_AB_CLUSTER_NODES=$NNODES: expected 1-99" >&2; exit 1; }
LAYOUT_FILE="$ETC/layout"   # netns | localhost: the layout the running cluster was started with
NAMES_FILE="$ETC/names"     # plain | ib [NODE...] (see `names`)
LAYOUT=localhost            # set by choose_layout (up) or current_layout
DB_SOCK="$RUN/mariadb.sock"
export SLURM_CONF="$CONF"

# The regular (multiple-slurmd, non-front-end) daemon builds. They are started through symlinks in
# $D/bin named slurmctld/slurmd/slurmstepd, see ensure_bin_links.
SLURMCTLD_REAL=/usr/sbin/slurmctld-wlm
SLURMD_REAL=/usr/sbin/slurmd-wlm
SLURMSTEPD_REAL=/usr/sbin/slurmstepd-wlm
BIN="$D/bin"
SLURMCTLD="$BIN/slurmctld"
SLURMD="$BIN/slurmd"
SLURMSTEPD="$BIN/slurmstepd"
SLURMDBD=/usr/sbin/slurmdbd

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: ERROR: %s\n' "$*" >&2; exit 1; }

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
node_name() { printf 'node%02d' "$1"; }
all_nodes() { local i; for ((i = 1; i <= NNODES; i++)); do node_name "$i"; echo; done; }
node_range() { printf 'node[01-%02d]' "$NNODES"; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root (use sudo)"; }

# ---------------------------------------------------------------- pid-file helpers
# pid_alive PIDFILE NAME: the pid in PIDFILE is alive and its /proc/PID/comm is NAME (guards against
# a stale pid file whose pid was reused). comm, unlike /proc/PID/exe, is readable without root, so
# `status` works for any user; our daemons run as slurmctld/slurmd (symlink names), slurmdbd,
# mariadbd and munged.
pid_of() { [[ -s $1 ]] && tr -dc '0-9' <"$1"; }
pid_alive() {
  local pid comm
  pid=$(pid_of "$1" 2>/dev/null) || return 1
  [[ -n $pid ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$2" ]] && running "$pid"
}

# running PID: the process exists and is not a zombie. TRAP: our daemons are re-parented to PID 1,
# and a container's PID 1 may reap late (here it took ~2 s): a dead daemon lingers as a zombie.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# stop_pidfile NAME PIDFILE COMM: SIGTERM, wait up to 20 s, then SIGKILL. Only ever signals the pid
# recorded in OUR pid file, and only if it still is the expected program.
stop_pidfile() {
  local name=$1 pf=$2 comm=$3 pid i
  if ! pid_alive "$pf" "$comm"; then rm -f "$pf"; return 0; fi
  pid=$(pid_of "$pf")
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    running "$pid" || break
    sleep 0.1
  done
  if running "$pid"; then
    log "$name (pid $pid) ignored SIGTERM for 20 s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do running "$pid" || break; sleep 0.1; done
  fi
  rm -f "$pf"
}

# wait_for DESC LOGFILE CMD...: poll CMD every 0.2 s until it succeeds or TIMEOUT passes; on
# timeout die with the tail of LOGFILE (the daemon that did not come up).
wait_for() {
  local desc=$1 logf=$2; shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      printf 'cluster: ERROR: timed out after %ss waiting for %s\n' "$TIMEOUT" "$desc" >&2
      if [[ -f $logf ]]; then
        printf -- '--- last lines of %s ---\n' "$logf" >&2
        tail -n 30 "$logf" >&2
      fi
      exit 1
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- install
cmd_install() {
  need_root
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if dpkg-query -W -f='${Status}' slurm-wlm-emulator 2>/dev/null | grep -q 'install ok installed'; then
    log "WARNING: slurm-wlm-emulator is installed; this script uses the explicit *-wlm binaries"
  fi
  if ((${#missing[@]} == 0)); then
    log "packages already installed: ${PACKAGES[*]}"
  else
    log "installing: ${missing[*]}"
    # Forbid the packages' init scripts from starting system daemons (see traps above).
    local prc=/usr/sbin/policy-rc.d
    if [[ ! -e $prc ]]; then
      printf '#!/bin/sh\nexit 101\n' >"$prc"; chmod 755 "$prc"
      trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    local rc=0
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; } || rc=$?
    ((rc == 0)) || die "apt-get failed (rc=$rc)"
  fi
  local b
  for b in "$SLURMCTLD_REAL" "$SLURMD_REAL" "$SLURMSTEPD_REAL" "$SLURMDBD"; do
    [[ -x $b ]] || die "$b missing after install"
  done
}

# ---------------------------------------------------------------- configuration
render_slurm_conf() {
  cat <<EOF
# Generated by testbed/slurm_ab_testbed/cluster.sh -- edits are overwritten by 'up'.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$(ctld_host)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Het jobs are started only by backfill; bf_interval=1 makes them start within ~1-2 s.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,bf_resolution=1
# The emulated nodes claim more CPUs/GPUs than the host has.
SlurmdParameters=config_overrides
ReturnToService=2
# Slurm's default is 30; above the local site's cluster.teardown_grace_s (10) as slurm-ab asks
# (slurm_ab/model/duration.grace_warnings): at 5 a server step whose non-head ranks exited on the
# teardown's SIGTERM was SIGKILLed by srun --kill-on-bad-exit 5 s later, before the grace ended.
KillWait=15
MinJobAge=30
InactiveLimit=0
Waittime=0
SlurmdTimeout=60
# Real accounting through slurmdbd.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(accounting_host)
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# Fake GPUs: a count only, no device files (see gres.conf).
GresTypes=gpu
$(render_node_lines)
PartitionName=gpu Nodes=$(node_range) Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
$(render_lanes)
EOF
}

# Lanes: each run of 9 nodes is also a partition of its own (lane1 = node[01-09], lane2 =
# node[10-18], ...), so that test workers run seed-shaped jobs side by side without taking each
# other's nodes (tests/conftest.py sends each pytest-xdist worker's jobs to one lane).
render_lanes() {
  local l
  for ((l = 1; l * 9 <= NNODES; l++)); do
    printf 'PartitionName=lane%s Nodes=node[%02d-%02d] MaxTime=INFINITE State=UP OverSubscribe=NO\n' \
      "$l" "$(((l - 1) * 9 + 1))" "$((l * 9))"
  done
}

# The controller's address: in the netns layout the nodes reach it on the bridge. slurmctld
# accepts "localhost" as its own name whatever the machine's hostname is.
ctld_host() { if [[ $LAYOUT == netns ]]; then printf 'localhost(%s)' "$HOST_ADDR"; else printf localhost; fi; }
accounting_host() { if [[ $LAYOUT == netns ]]; then printf '%s' "$HOST_ADDR"; else printf localhost; fi; }
render_node_lines() {
  local node_opts="CPUs=$NODE_CPUS RealMemory=$NODE_MEM_MB Gres=gpu:$NODE_GPUS State=UNKNOWN" i n
  if [[ $LAYOUT == netns ]]; then
    for ((i = 1; i <= NNODES; i++)); do
      n=$(node_name "$i")
      printf 'NodeName=%s NodeHostname=%s NodeAddr=%s Port=%s %s\n' "$n" "$n" "$(node_addr "$i")" \
        "$((NODE_PORT_BASE + i))" "$node_opts"
    done
  else
    printf 'NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=[%s-%s] %s\n' "$(node_range)" \
      "$((NODE_PORT_BASE + 1))" "$((NODE_PORT_BASE + NNODES))" "$node_opts"
  fi
}

# TRAP: Slurm 22.05 drops every GPU GRES without File= ("Removing file-less GPU"), the node then
# reports gpu:0 and goes INVAL ("gres/gpu count reported lower than configured (0 < 8)"). The File
# entries must stat() as character/block devices: $D/dev/gpuN are symlinks to /dev/null (the
# trailing digit becomes the GPU index, so jobs see CUDA_VISIBLE_DEVICES=0..7).
ensure_fake_gpus() {
  local i
  mkdir -p "$D/dev"
  for ((i = 0; i < NODE_GPUS; i++)); do ln -sfn /dev/null "$D/dev/gpu$i"; done
}
render_gres_conf() {
  printf '# Generated by cluster.sh: fake GPUs (see ensure_fake_gpus).\nNodeName=%s Name=gpu File=%s/dev/gpu[0-%s]\n' \
    "$(node_range)" "$D" "$((NODE_GPUS - 1))"
}

render_cgroup_conf() {
  # slurmd 22.05 always initialises a cgroup plugin; never talk to (absent) systemd.
  printf '# Generated by cluster.sh\nCgroupPlugin=autodetect\nIgnoreSystemd=yes\n'
}

render_slurmdbd_conf() {
  cat <<EOF
# Generated by testbed/slurm_ab_testbed/cluster.sh
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/dbpass")
StorageLoc=slurm_acct_db
EOF
}

# write_if_changed FILE MODE: stdin -> FILE, only when the content differs. Returns 0 if written.
write_if_changed() {
  local f=$1 mode=$2 tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [[ -f $f ]] && cmp -s "$tmp" "$f"; then rm -f "$tmp"; return 1; fi
  mv -f "$tmp" "$f"
  return 0
}

# TRAP: Slurm decides "am I slurmctld / slurmd / slurmstepd?" (running_in_slurmctld() etc.) by
# comparing basename(argv[0]) with the daemon name. Started as "slurmctld", slurmctld never
# sets up its slurmdbd agent connection and segfaults in slurm_persist_msg_pack() on its first
# accounting message (acct_storage_p_flush_jobs_on_cluster). slurmd also execs the -d stepd path
# as argv[0]. So we run the -wlm binaries via symlinks carrying the plain daemon names; this also
# pins the non-emulator builds whatever the /usr/sbin/slurm* alternatives point to.
ensure_bin_links() {
  mkdir -p "$BIN"
  ln -sfn "$SLURMCTLD_REAL" "$SLURMCTLD"
  ln -sfn "$SLURMD_REAL" "$SLURMD"
  ln -sfn "$SLURMSTEPD_REAL" "$SLURMSTEPD"
}

write_configs() {
  mkdir -p "$ETC" "$RUN" "$LOG" "$D/state" "$D/spool"
  ensure_bin_links
  ensure_fake_gpus
  local n
  for n in $(all_nodes); do mkdir -p "$D/spool/$n"; done
  chmod 755 "$D"
  if [[ ! -s $ETC/dbpass ]]; then
    # Local-only password (MariaDB listens on 127.0.0.1 only), generated once per state dir.
    (umask 077; od -An -tx1 -N12 /dev/urandom | tr -d ' \n' >"$ETC/dbpass")
  fi
  local changed=0
  render_slurm_conf | write_if_changed "$CONF" 644 && changed=1
  render_gres_conf | write_if_changed "$ETC/gres.conf" 644 && changed=1
  render_cgroup_conf | write_if_changed "$ETC/cgroup.conf" 644 && changed=1
  render_slurmdbd_conf | write_if_changed "$ETC/slurmdbd.conf" 600 && changed=1
  if ((changed)) && pid_alive "$RUN/slurmctld.pid" slurmctld; then
    log "WARNING: configuration changed while the cluster runs; apply it with: $0 down && $0 up"
  fi
  return 0
}

# /etc/hosts: make nodeNN resolvable, marked lines, edited in place. localhost layout: one line
# (127.0.0.1); netns layout: one line per node with its own address, named nodeNN (names plain)
# or only nodeNN-ib (names ib).
hosts_lines() {
  if [[ $LAYOUT != netns ]]; then
    printf '127.0.0.1 %s %s\n' "$(all_nodes | tr '\n' ' ' | sed 's/ $//')" "$HOSTS_MARK"
    return
  fi
  local names=(plain) i n suffix
  [[ -s $NAMES_FILE ]] && read -r -a names <"$NAMES_FILE"
  for ((i = 1; i <= NNODES; i++)); do
    n=$(node_name "$i") suffix=""
    # ib: every node (no list), or the listed ones only (a test's own nodes; other jobs keep theirs)
    if [[ ${names[0]} == ib ]] && { ((${#names[@]} == 1)) || [[ " ${names[*]:1} " == *" $n "* ]]; }; then
      suffix=-ib
    fi
    printf '%s %s%s %s\n' "$(node_addr "$i")" "$n" "$suffix" "$HOSTS_MARK"
  done
}
ensure_hosts() {
  local want
  want=$(hosts_lines)
  [[ $(grep -F "$HOSTS_MARK" /etc/hosts || true) == "$want" ]] && return 0
  local tmp
  tmp=$(mktemp)
  grep -vF "$HOSTS_MARK" /etc/hosts >"$tmp" || true
  printf '%s\n' "$want" >>"$tmp"
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
  log "node names in /etc/hosts ($LAYOUT layout)"
}
remove_hosts() {
  grep -qF "$HOSTS_MARK" /etc/hosts || return 0
  local tmp
  tmp=$(mktemp)
  grep -vF "$HOSTS_MARK" /etc/hosts >"$tmp" || true
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

# /etc/slurm/slurm.conf -> our conf, so client commands work without SLURM_CONF. Only if absent or
# already our symlink; never overwrite a real file.
ensure_conf_link() {
  local link=/etc/slurm/slurm.conf
  mkdir -p /etc/slurm
  if [[ -L $link ]]; then
    [[ $(readlink "$link") == "$CONF" ]] && return 0
    log "WARNING: $link is a symlink to $(readlink "$link"), not ours; export SLURM_CONF=$CONF"
  elif [[ -e $link ]]; then
    log "WARNING: $link exists and is not ours; client commands need: export SLURM_CONF=$CONF"
  else
    ln -s "$CONF" "$link"
  fi
}
remove_conf_link() {
  local link=/etc/slurm/slurm.conf
  if [[ -L $link ]] && [[ $(readlink "$link") == "$CONF" ]]; then rm -f "$link"; fi
}

# ---------------------------------------------------------------- node network (netns layout)
node_addr() { printf '%s.%d' "$NET_PREFIX" "$((NODE_ADDR_BASE + $1))"; }   # node_addr INDEX
node_ns() { printf '%s%s' "$NS_PREFIX" "$1"; }                            # node_ns NAME
node_veth() { printf '%s%s' "$VETH_PREFIX" "${1#node}"; }                 # node_veth NAME
our_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}node[0-9]+\$" || true; }
our_links() {
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^(${VETH_PREFIX}[0-9]+|$BRIDGE)\$" || true
}
fallback_route_ok() {
  ip route show type unreachable 2>/dev/null | grep -qE "^unreachable $SUBNET( .*)? metric $FALLBACK_METRIC\b"
}
# The fallback route goes in FIRST, before any address of the subnet exists (see the header).
ensure_fallback_route() {
  fallback_route_ok && return 0
  ip route add unreachable "$SUBNET" metric "$FALLBACK_METRIC" || return 1
  fallback_route_ok
}

# net_up: bridge, namespaces, veths, addresses; idempotent, and on a running cluster it also undoes
# what the fault commands did (link up, no rate limit). Every command is checked explicitly: this
# runs inside `if`, where set -e does not apply.
net_up() {
  command -v ip >/dev/null || { echo "ip (iproute2) not found"; return 1; }
  ensure_fallback_route || { echo "cannot add the fallback route 'unreachable $SUBNET metric $FALLBACK_METRIC'"; return 1; }
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then ip link add "$BRIDGE" type bridge || return 1; fi
  ip addr replace "$HOST_ADDR/24" dev "$BRIDGE" || return 1
  ip link set "$BRIDGE" up || return 1
  local i n ns veth
  for ((i = 1; i <= NNODES; i++)); do
    n=$(node_name "$i"); ns=$(node_ns "$n"); veth=$(node_veth "$n")
    [[ -e /run/netns/$ns ]] || ip netns add "$ns" || return 1
    if ! ip link show "$veth" >/dev/null 2>&1; then
      ip -n "$ns" link del eth0 2>/dev/null || true
      ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
    fi
    ip link set "$veth" master "$BRIDGE" || return 1
    ip link set "$veth" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr replace "$(node_addr "$i")/24" dev eth0 || return 1
    clear_faults "$ns" || return 1
  done
  fallback_route_ok || { echo "the fallback route disappeared"; return 1; }
}

# net_down: end what still runs inside our namespaces (leftovers of jobs or of an interrupted run;
# only processes in namespaces this script created), delete the veths (both ends), the namespaces
# and the bridge, and wait until the kernel has removed the links (that happens asynchronously).
net_down() {
  local ns pids=() p i
  for ns in $(our_namespaces); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do pids+=("$p"); done
  done
  if ((${#pids[@]})); then
    log "ending ${#pids[@]} process(es) left in the node namespaces: ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      local alive=0
      for p in "${pids[@]}"; do running "$p" && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  local l
  for l in $(our_links); do [[ $l == "$BRIDGE" ]] || ip link del "$l" 2>/dev/null || true; done
  for ns in $(our_namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$BRIDGE" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [[ -z $(our_links) && -z $(our_namespaces) ]] && return 0
    sleep 0.1
  done
  log "WARNING: still present after 10 s: $(our_links | tr '\n' ' ')$(our_namespaces | tr '\n' ' ')"
}

# clear_faults NS: what the fault commands change inside a node's namespace, undone (link up, no
# rate limit, no block); `up` does it for every node, `heal` for the nodes it is given.
clear_faults() {
  ip -n "$1" link set eth0 up || return 1
  tc -n "$1" qdisc del dev eth0 root 2>/dev/null || true
  unblock "$1"
}

BLOCK_TABLE=77; BLOCK_PREF=100
unblock() {
  while ip -n "$1" rule del pref "$BLOCK_PREF" 2>/dev/null; do :; done
  ip -n "$1" route flush table "$BLOCK_TABLE" 2>/dev/null || true
}

current_layout() {
  LAYOUT=localhost
  if [[ -s $LAYOUT_FILE ]]; then LAYOUT=$(<"$LAYOUT_FILE"); fi
}

# choose_layout: on a running cluster keep its layout (and repair its network); otherwise clean up
# leftovers of an earlier run and set up the requested layout (auto: netns if it can be built).
choose_layout() {
  mkdir -p "$ETC" "$LOG" "$RUN"
  case $NET_REQ in auto|netns|localhost) ;; *) die "SLURM_AB_CLUSTER_NET=$NET_REQ: expected auto, netns or localhost" ;; esac
  if pid_alive "$RUN/slurmctld.pid" slurmctld; then
    current_layout
    local had
    had=$(cat "$NODES_FILE" 2>/dev/null || echo "$NNODES")
    if [[ $had != "$NNODES" ]]; then
      log "WARNING: the running cluster has $had nodes, not $NNODES: kept (for $NNODES: $0 down && SLURM_AB_CLUSTER_NODES=$NNODES $0 up)"
      NNODES=$had
    fi
    if [[ $NET_REQ != auto && $NET_REQ != "$LAYOUT" ]]; then
      log "WARNING: the running cluster uses the $LAYOUT layout; to switch: $0 down && SLURM_AB_CLUSTER_NET=$NET_REQ $0 up"
    fi
    if [[ $LAYOUT == netns ]]; then
      local err
      err=$(net_up 2>&1) || die "node network: $err"
    fi
    return 0
  fi
  # Not running: slurmds or namespaces of an interrupted run go first.
  local n
  for n in $(all_nodes); do stop_pidfile "slurmd $n" "$RUN/slurmd.$n.pid" slurmd; done
  if [[ -n $(our_namespaces)$(our_links) ]]; then log "removing the node network of an earlier run"; fi
  net_down
  printf 'plain\n' >"$NAMES_FILE"
  local err=""
  case $NET_REQ in
    localhost) LAYOUT=localhost ;;
    netns)
      err=$(net_up 2>&1) || { net_down; die "netns layout requested but not possible: $err"; }
      LAYOUT=netns ;;
    auto)
      if err=$(net_up 2>&1); then LAYOUT=netns
      else
        log "network namespaces cannot be created here ($err); using the shared-localhost layout"
        net_down
        LAYOUT=localhost
      fi ;;
  esac
  printf '%s\n' "$LAYOUT" >"$LAYOUT_FILE"
  log "network layout: $LAYOUT"
}

# ---------------------------------------------------------------- daemons
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_ok; then
    pid_alive "$MUNGE_DIR/munged.pid" munged || log "munged: using an already running munged"
    return 0
  fi
  mkdir -p /run/munge "$MUNGE_DIR"
  chown munge:munge /run/munge "$MUNGE_DIR"
  chmod 0755 /run/munge
  chmod 0755 "$MUNGE_DIR"  # readable so `status` can read the pid file as non-root
  local key=/etc/munge/munge.key
  if [[ ! -s $key ]]; then
    key=$MUNGE_DIR/munge.key
    if [[ ! -s $key ]]; then
      mungekey --create --keyfile="$key"
      chown munge:munge "$key"; chmod 0600 "$key"
    fi
  fi
  log "starting munged"
  # munged refuses to run as root; it daemonises itself.
  runuser -u munge -- /usr/sbin/munged --key-file="$key" --pid-file="$MUNGE_DIR/munged.pid" \
    --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" ||
    { tail -n 20 "$MUNGE_DIR/munged.log" >&2 2>/dev/null; die "munged failed to start"; }
  wait_for "munge -n | unmunge" "$MUNGE_DIR/munged.log" munge_ok
}

mariadb_ping() { mariadb-admin --no-defaults --socket="$DB_SOCK" -uroot ping; }
mariadb_sql() { mariadb --no-defaults --socket="$DB_SOCK" -uroot -e "$1"; }

start_mariadb() {
  if pid_alive "$RUN/mariadb.pid" mariadbd; then
    wait_for "mariadb" "$LOG/mariadb.log" mariadb_ping
    chmod 644 "$RUN/mariadb.pid"
    return 0
  fi
  if [[ ! -d $DBDIR/mysql ]]; then
    log "initialising MariaDB datadir $DBDIR"
    mkdir -p "$DBDIR"
    mariadb-install-db --no-defaults --datadir="$DBDIR" --user=root --skip-test-db \
      --auth-root-authentication-method=socket >"$LOG/mariadb-install.log" 2>&1 ||
      { tail -n 30 "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  log "starting mariadbd (127.0.0.1:$DB_PORT)"
  # mariadbd does not daemonise: detach it with setsid so it survives this shell.
  setsid /usr/sbin/mariadbd --no-defaults --user=root --datadir="$DBDIR" \
    --socket="$DB_SOCK" --pid-file="$RUN/mariadb.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
    --skip-name-resolve --log-error="$LOG/mariadb.log" \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    </dev/null >>"$LOG/mariadb.log" 2>&1 &
  wait_for "mariadb" "$LOG/mariadb.log" mariadb_ping
  chmod 644 "$RUN/mariadb.pid"  # mariadbd writes it 0660; let `status` read it as any user
  local pw
  pw=$(cat "$ETC/dbpass")
  mariadb_sql "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
    ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
    GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    die "could not create the slurm MariaDB user"
}

dbd_ok() { sacctmgr -n -P list cluster format=cluster; }
cluster_registered() { sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER_NAME"; }
# The ctld has connected to slurmdbd once the cluster row carries a control host.
ctld_registered() {
  sacctmgr -n -P list cluster format=cluster,controlhost | grep -q "^$CLUSTER_NAME|[0-9]"
}

start_slurmdbd() {
  if ! pid_alive "$RUN/slurmdbd.pid" slurmdbd; then
    log "starting slurmdbd"
    "$SLURMDBD" || die "slurmdbd failed to start (see $LOG/slurmdbd.log)"
  fi
  wait_for "slurmdbd (sacctmgr list cluster)" "$LOG/slurmdbd.log" dbd_ok
  if ! cluster_registered; then
    sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null || die "sacctmgr add cluster failed"
  fi
}

ctld_ok() { scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
  if ! pid_alive "$RUN/slurmctld.pid" slurmctld; then
    log "starting slurmctld"
    "$SLURMCTLD" -f "$CONF" || die "slurmctld failed to start (see $LOG/slurmctld.log)"
  fi
  wait_for "slurmctld (scontrol ping)" "$LOG/slurmctld.log" ctld_ok
}

start_slurmds() {
  local n started=0
  for n in $(all_nodes); do
    pid_alive "$RUN/slurmd.$n.pid" slurmd && continue
    if [[ $LAYOUT == netns ]]; then
      # Inside the node's network namespace and a new UTS namespace (hostname nodeNN); slurmd
      # daemonises and keeps both, and so does every step it starts.
      # shellcheck disable=SC2016  # $1 and $@ expand in the inner sh
      nsenter --net="/run/netns/$(node_ns "$n")" -- unshare --uts -- \
        sh -c 'hostname "$1" && shift && exec "$@"' sh "$n" "$SLURMD" -f "$CONF" -N "$n" -d "$SLURMSTEPD" ||
        die "slurmd $n failed to start in $(node_ns "$n") (see $LOG/slurmd.$n.log)"
    else
      "$SLURMD" -f "$CONF" -N "$n" -d "$SLURMSTEPD" || die "slurmd $n failed to start (see $LOG/slurmd.$n.log)"
    fi
    started=$((started + 1))
  done
  ((started == 0)) || log "started $started slurmd"
}

# A usable node (sinfo %t): idle, allocated, mixed or completing, with no flags (* not responding,
# ~ powered off, # powering up, ! pending power down, % powering down, $ maintenance, @ reboot).
USABLE='idle|alloc|mix|comp'
# All nodes are usable.
nodes_ready() {
  local out
  out=$(sinfo -h -N -o '%N %t') || return 1
  [[ $(printf '%s\n' "$out" | grep -c .) -ge $NNODES ]] || return 1
  ! printf '%s\n' "$out" | awk '{print $2}' | grep -qvxE "$USABLE"
}

# Nodes that stay down/drained although their slurmd runs (e.g. "Not responding" left over from a
# previous run) are resumed once.
resume_stuck_nodes() {
  local n st
  while read -r n st; do
    case $st in
      down*|drain*|drng*|fail*)
        pid_alive "$RUN/slurmd.$n.pid" slurmd || continue
        log "resuming $n (state $st)"
        scontrol update nodename="$n" state=resume 2>/dev/null || true ;;
    esac
  done < <(sinfo -h -N -o '%N %t' 2>/dev/null)
}

wait_nodes() {
  local deadline=$((SECONDS + TIMEOUT)) resumed=0
  until nodes_ready; do
    if ((!resumed && SECONDS + TIMEOUT - deadline >= 2)); then resume_stuck_nodes; resumed=1; fi
    if ((SECONDS >= deadline)); then
      printf 'cluster: ERROR: timed out after %ss waiting for %s nodes to be idle\n' "$TIMEOUT" "$NNODES" >&2
      sinfo -N -o '%N %T %E' >&2 || true
      local bad
      bad=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk -v ok="^($USABLE)\$" '$2 !~ ok {print $1; exit}')
      for f in "$LOG/slurmd.${bad:-node01}.log" "$LOG/slurmctld.log"; do
        [[ -f $f ]] && { printf -- '--- last lines of %s ---\n' "$f" >&2; tail -n 20 "$f" >&2; }
      done
      exit 1
    fi
    sleep 0.2
  done
}

sacct_ok() { sacct -n -X -S now-1minutes -o JobID; }

cmd_up() {
  need_root
  local t0=$EPOCHREALTIME
  for b in "$SLURMCTLD_REAL" "$SLURMD_REAL" "$SLURMSTEPD_REAL" "$SLURMDBD" /usr/sbin/mariadbd /usr/sbin/munged; do
    [[ -x $b ]] || die "$b not found; run: $0 install"
  done
  choose_layout
  printf '%s\n' "$NNODES" >"$NODES_FILE"
  write_configs
  ensure_hosts
  ensure_conf_link
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmds
  wait_nodes
  wait_for "slurmctld to register with slurmdbd" "$LOG/slurmctld.log" ctld_registered
  wait_for "sacct" "$LOG/slurmdbd.log" sacct_ok
  log "cluster up ($LAYOUT layout): $NNODES nodes idle, accounting answers ($(elapsed "$t0") s); SLURM_CONF=$CONF"
}

# ---------------------------------------------------------------- down
cancel_jobs() {
  pid_alive "$RUN/slurmctld.pid" slurmctld || return 0
  local jobs
  jobs=$(squeue -h -o '%A' 2>/dev/null | sort -u) || return 0
  [[ -n $jobs ]] || return 0
  log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
  # shellcheck disable=SC2086  # word splitting of the job id list is intended
  scancel $jobs 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while [[ -n $(squeue -h -o '%A' 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.2; done
}

cmd_down() {
  need_root
  local purge=0
  [[ ${1:-} == --purge ]] && purge=1
  cancel_jobs
  local n cnt=0
  for n in $(all_nodes); do
    # SIGTERM all slurmds at once, then wait for each (stop_pidfile)
    if pid_alive "$RUN/slurmd.$n.pid" slurmd; then
      kill -TERM "$(pid_of "$RUN/slurmd.$n.pid")" 2>/dev/null || true
      cnt=$((cnt + 1))
    fi
  done
  ((cnt == 0)) || log "stopping $cnt slurmd"
  for n in $(all_nodes); do stop_pidfile "slurmd $n" "$RUN/slurmd.$n.pid" slurmd; done
  stop_pidfile slurmctld "$RUN/slurmctld.pid" slurmctld
  stop_pidfile slurmdbd "$RUN/slurmdbd.pid" slurmdbd
  stop_pidfile mariadbd "$RUN/mariadb.pid" mariadbd
  stop_pidfile munged "$MUNGE_DIR/munged.pid" munged
  if [[ -n $(our_namespaces)$(our_links) ]]; then
    net_down
    log "node network removed (namespaces, links, bridge)"
  fi
  remove_hosts
  if ((purge)); then
    remove_conf_link
    if fallback_route_ok; then ip route del unreachable "$SUBNET" metric "$FALLBACK_METRIC" 2>/dev/null || true; fi
    case $D in /|/var|/var/lib|/tmp|/root|"") die "refusing to purge $D" ;; esac
    rm -rf "$D"
    log "purged $D"
  else
    log "cluster down (state and logs kept in $D)"
  fi
}

# ---------------------------------------------------------------- status
status_network() {
  current_layout
  local ns_count
  ns_count=$(our_namespaces | grep -c . || true)
  if [[ $LAYOUT == netns ]]; then
    printf 'network          netns: %s namespaces %snode01.., bridge %s %s/24, node addresses %s..%s\n' \
      "$ns_count" "$NS_PREFIX" "$BRIDGE" "$HOST_ADDR" "$(node_addr 1)" "$(node_addr "$NNODES")"
    if fallback_route_ok; then printf '%-16s unreachable %s metric %s\n' fallback "$SUBNET" "$FALLBACK_METRIC"
    else printf '%-16s MISSING (unreachable %s metric %s)\n' fallback "$SUBNET" "$FALLBACK_METRIC"; bad=1; fi
    ((ns_count == NNODES)) || bad=1
  else
    printf 'network          localhost: shared (every node is 127.0.0.1)\n'
    ((ns_count == 0)) || { printf '%-16s %s namespaces left over (cluster.sh up removes them)\n' network "$ns_count"; bad=1; }
  fi
}

cmd_status() {
  local bad=0 n
  status_network
  report() { # NAME PIDFILE EXE
    if pid_alive "$2" "$3"; then printf '%-16s up    pid %s\n' "$1" "$(pid_of "$2")"
    else printf '%-16s DOWN\n' "$1"; bad=1; fi
  }
  if pid_alive "$MUNGE_DIR/munged.pid" munged; then
    printf '%-16s up    pid %s\n' munged "$(pid_of "$MUNGE_DIR/munged.pid")"
  elif munge_ok; then
    printf '%-16s up    (not started by us)\n' munged
  else
    printf '%-16s DOWN\n' munged; bad=1
  fi
  report mariadbd "$RUN/mariadb.pid" mariadbd
  report slurmdbd "$RUN/slurmdbd.pid" slurmdbd
  report slurmctld "$RUN/slurmctld.pid" slurmctld
  for n in $(all_nodes); do report "slurmd $n" "$RUN/slurmd.$n.pid" slurmd; done
  if pid_alive "$RUN/slurmctld.pid" slurmctld; then
    sinfo -N -o '%N %P %T %G' || bad=1
  fi
  echo "export SLURM_CONF=$CONF"
  return "$bad"
}

# ---------------------------------------------------------------- network faults (tests)
# cmd_fault link NODE up|down | rate NODE RATE|off | names plain|ib: netns layout only, applied on
# the node's side (inside its namespace); the bridge and its route are never touched.
cmd_fault() {
  need_root
  current_layout
  [[ $LAYOUT == netns ]] || die "$1: the cluster does not run in the netns layout"
  fallback_route_ok || die "the fallback route (unreachable $SUBNET metric $FALLBACK_METRIC) is missing; run: $0 up"
  local what=$1 node=${2:-} arg=${3:-} ns
  if [[ $what == names ]]; then
    [[ $node == plain || $node == ib ]] || die "names: expected plain or ib, got '$node'"
    shift 2
    local n
    for n in "$@"; do [[ $n =~ ^node[0-9]+$ ]] || die "names $node: not a node name: '$n'"; done
    printf '%s\n' "$node${*:+ $*}" >"$NAMES_FILE"
    ensure_hosts
    return 0
  fi
  ns=$(node_ns "$node")
  [[ $node =~ ^node[0-9]+$ && -e /run/netns/$ns ]] || die "$what: no namespace for node '$node'"
  case $what:$arg in
    link:up|link:down) ip -n "$ns" link set eth0 "$arg" ;;
    block:off) unblock "$ns" ;;
    block:node*)
      local port=${4:-} to
      [[ $port =~ ^[0-9]+$ && $arg =~ ^node([0-9]+)$ ]] || die "block $node: expected TO-NODE PORT, got '$arg' '$port'"
      to=$(node_addr "$((10#${BASH_REMATCH[1]}))")   # (BASH_REMATCH of the last =~: the node)
      ip -n "$ns" route replace unreachable default table "$BLOCK_TABLE"
      ip -n "$ns" rule add to "$to/32" ipproto tcp dport "$port" table "$BLOCK_TABLE" pref "$BLOCK_PREF"
      arg="$arg ($to) port $port" ;;
    rate:off) tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true ;;
    rate:[0-9]*) tc -n "$ns" qdisc replace dev eth0 root tbf rate "$arg" burst 4kb latency 2s ;;
    *) die "$what $node: bad argument '$arg' (link: up|down; rate: e.g. 400kbit, or off)" ;;
  esac
  log "$what $node $arg"
}

# heal NODE...: what `up` repairs on a running cluster, for these nodes only (link up, no rate
# limit, no block, their slurmd restarted if it died, resumed if Slurm marked them down), so that a
# test repairs its own nodes without undoing faults other tests hold on theirs.
cmd_heal() {
  need_root
  current_layout
  (($#)) || die "heal: name the node(s)"
  local n ns st i
  for n in "$@"; do
    [[ $n =~ ^node[0-9]+$ ]] || die "heal: not a node name: '$n'"
    if [[ $LAYOUT == netns ]]; then
      ns=$(node_ns "$n")
      [[ -e /run/netns/$ns ]] || die "heal: no namespace for node '$n'"
      clear_faults "$ns"
    fi
  done
  start_slurmds
  for n in "$@"; do
    for ((i = 0; i < 5 * TIMEOUT; i++)); do
      st=$(sinfo -h -N -n "$n" -o '%t' 2>/dev/null | head -n 1)
      [[ $st =~ ^($USABLE)$ ]] && break
      case $st in down*|drain*|drng*|fail*) scontrol update nodename="$n" state=resume 2>/dev/null || true ;; esac
      sleep 0.2
    done
    [[ $st =~ ^($USABLE)$ ]] || die "heal: $n is still $st"
  done
  log "healed $*"
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    install) cmd_install ;;
    up) cmd_up ;;
    down) cmd_down "$@" ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    link|rate|names|block) cmd_fault "$cmd" "$@" ;;
    heal) cmd_heal "$@" ;;
    *) sed -n '4,38s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
}

main "$@"
