#!/usr/bin/env bash
# A throwaway local Slurm for the end-to-end test: its own munged, slurmctld and one slurmd per node, 8 GPUs
# per node as gres (type h100, empty device files), all state in one folder, every daemon stopped by its PID.
#
#   .ci/slurm.sh install          install Debian's slurmctld slurmd slurm-client munge (root only)
#   .ci/slurm.sh start DIR [N]    start a cluster of N nodes (default 2) in DIR; prints `export SLURM_CONF=...`
#   .ci/slurm.sh stop DIR         cancel the jobs, stop every process listed in DIR/pids, remove the namespaces
#
# With N >= 2 each node is a network namespace (ip netns) with its own address on a bridge and its own
# hostname (a UTS namespace), running its own slurmd; slurmctld and munged run in the root namespace.
# With N = 1 (or when namespaces cannot be made) there is one node named after this host.
# Environment: PLC_SLURM_PORT (slurmctld port, default 16817; slurmd uses +1), PLC_SLURM_NET (the nodes' /24,
# default 10.211.0), PLC_SLURM_PREFIX (node and interface names, default plc: nodes plc-n1, plc-n2, ...).
set -euo pipefail

log() { echo "slurm.sh: $*" >&2; }

install_slurm() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        log "Slurm is not installed and this is not root; install slurmctld slurmd slurm-client munge"
        return 3
    fi
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -o DPkg::Lock::Timeout=600 -y)
    "${apt[@]}" install slurmctld slurmd slurm-client munge >&2 \
        || { "${apt[@]}" update >&2 && "${apt[@]}" install slurmctld slurmd slurm-client munge >&2; }
}

record() {  # record NAME PID: one line per process this script started
    echo "$1 $2" >>"$DIR/pids"
    log "started $1 pid $2"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2
    shift 2
    local i
    for ((i = 0; i < limit * 4; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.25
    done
    log "timed out after ${limit}s waiting for $what"
    return 1
}

make_netns() {  # make_netns N: a bridge plus one namespace per node; returns 1 if the kernel refuses
    local n=$1 i
    ip link add "$BRIDGE" type bridge 2>/dev/null || return 1
    echo "link $BRIDGE" >>"$DIR/net"
    ip addr add "$NET.1/24" dev "$BRIDGE" && ip link set "$BRIDGE" up || return 1
    for ((i = 1; i <= n; i++)); do
        local ns="$PREFIX-n$i" veth="$PREFIX-v$i"
        ip netns add "$ns" || return 1
        echo "netns $ns" >>"$DIR/net"
        ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
        echo "link $veth" >>"$DIR/net"
        ip link set "$veth" master "$BRIDGE" && ip link set "$veth" up || return 1
        ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0 || return 1
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
    done
}

remove_net() {
    [ -f "$DIR/net" ] || return 0
    local kind name
    tac "$DIR/net" | while read -r kind name; do
        case $kind in
            netns) ip netns del "$name" 2>/dev/null || true ;;
            link) ip link del "$name" 2>/dev/null || true ;;
        esac
    done
    rm -f "$DIR/net"
}

write_conf() {  # write_conf CTLD_HOST CTLD_ADDR NODE_LINES TOPOLOGY_TEXT
    cat >"$DIR/slurm.conf" <<EOF
# Written by .ci/slurm.sh for a throwaway test cluster.
ClusterName=placement
SlurmctldHost=$1($2)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
TopologyPlugin=topology/tree
$3
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    printf '%s\n' "$4" >"$DIR/topology.conf"
    mkdir -p "$DIR/dev"
    local k
    for k in 0 1 2 3 4 5 6 7; do : >"$DIR/dev/nvidia$k"; done
    # Type= (or Cores=) makes slurmctld keep per-GPU indices, so `scontrol -d show node` prints
    # GresUsed=gpu:h100:3(IDX:0-2) instead of a bare count
    echo "Name=gpu Type=h100 File=$DIR/dev/nvidia[0-7]" >"$DIR/gres.conf"
}

start() {
    local nodes=${1:-2}
    install_slurm
    if [ -f "$DIR/pids" ]; then
        log "$DIR/pids exists: a cluster may be running there; run '$0 stop $DIR' first"
        return 1
    fi
    mkdir -p "$DIR"/{state,spool,run,log,munge}
    : >"$DIR/pids"

    # munge: a private key, socket and daemon, so that nothing else on this machine is touched
    if [ ! -f "$DIR/munge/munge.key" ]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
        chmod 400 "$DIR/munge/munge.key"
    fi
    munged --force --foreground --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed" \
        >"$DIR/log/munged.out" 2>&1 </dev/null &
    record munged $!
    wait_for 20 munged test -S "$DIR/munge/munge.socket"

    local mode=netns
    if [ "$nodes" -lt 2 ]; then mode=single; fi
    if [ $mode = netns ] && ! make_netns "$nodes"; then
        log "could not make network namespaces here; falling back to one node"
        remove_net
        mode=single
    fi

    local node_lines topo names=()
    if [ $mode = netns ]; then
        local i
        node_lines=""
        for ((i = 1; i <= nodes; i++)); do
            names+=("$PREFIX-n$i")
            node_lines+="NodeName=$PREFIX-n$i NodeAddr=$NET.$((10 + i)) CPUs=16 Gres=gpu:h100:8 State=UNKNOWN"$'\n'
        done
        # one leaf switch per node under one spine: `scontrol show topology` then has two levels
        topo=""
        for ((i = 1; i <= nodes; i++)); do topo+="SwitchName=leaf$i Nodes=$PREFIX-n$i"$'\n'; done
        topo+="SwitchName=spine Switches=leaf[1-$nodes]"
        write_conf "$(hostname -s)" "$NET.1" "$node_lines" "$topo"
    else
        local host
        host=$(hostname -s)
        names=("$host")
        node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=16 Gres=gpu:h100:8 State=UNKNOWN"
        write_conf "$host" 127.0.0.1 "$node_lines" "SwitchName=leaf1 Nodes=$host"$'\n'"SwitchName=spine Switches=leaf1"
    fi
    echo "$mode ${names[*]}" >"$DIR/nodes"

    export SLURM_CONF="$DIR/slurm.conf"
    setsid slurmctld -D -c -f "$SLURM_CONF" >"$DIR/log/slurmctld.out" 2>&1 </dev/null &
    record slurmctld $!
    wait_for 30 slurmctld scontrol ping

    local name
    for name in "${names[@]}"; do
        mkdir -p "$DIR/spool/$name"
        if [ $mode = netns ]; then
            # nsenter (not `ip netns exec`, which remounts /sys and hides the cgroup tree slurmd needs) and
            # unshare exec in place, so $! is the slurmd itself
            setsid nsenter --net="/run/netns/$name" unshare --uts sh -c \
                'hostname "$1" && exec slurmd -D -N "$1" -f "$2"' sh "$name" "$SLURM_CONF" \
                >"$DIR/log/slurmd-$name.out" 2>&1 </dev/null &
        else
            setsid slurmd -D -N "$name" -f "$SLURM_CONF" >"$DIR/log/slurmd-$name.out" 2>&1 </dev/null &
        fi
        record "slurmd-$name" $!
    done
    # every node idle (not down, drained or invalid) before anyone submits
    if ! wait_for 60 "${#names[@]} idle node(s)" all_idle "${#names[@]}"; then
        sinfo -N -o "%N %T %E" >&2 || true
        tail -n 20 "$DIR"/log/slurmctld.log "$DIR"/log/slurmd-*.log >&2 || true
        return 1
    fi
    log "cluster up ($mode): ${names[*]}"
    echo "export SLURM_CONF=$SLURM_CONF"
}

all_idle() {
    local want=$1 got
    got=$(sinfo -h -N -t idle -o "%N" | sort -u | grep -c .)
    [ "$got" -ge "$want" ]
}

stop() {
    [ -f "$DIR/pids" ] || { log "no $DIR/pids: nothing to stop"; remove_net; return 0; }
    export SLURM_CONF="$DIR/slurm.conf"
    # jobs first: their slurmstepd processes outlive a killed slurmd
    if scontrol ping >/dev/null 2>&1; then
        local user
        user=$(id -un)
        scancel -u "$user" >/dev/null 2>&1 || true
        wait_for 30 "the jobs to end" no_jobs || true
    fi
    local name pid
    tac "$DIR/pids" | while read -r name pid; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            local i
            for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
            log "stopped $name pid $pid"
        fi
    done
    # processes left in a node's namespace (a step that ignored the cancel) are ours: stop them by PID
    if [ -f "$DIR/net" ]; then
        local kind ns
        while read -r kind ns; do
            [ "$kind" = netns ] || continue
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        done <"$DIR/net"
    fi
    remove_net
    rm -f "$DIR/pids"
}

no_jobs() { [ -z "$(squeue -h -o %i)" ]; }

cmd=${1:-}
DIR=${2:-}
PORT=${PLC_SLURM_PORT:-16817}
NET=${PLC_SLURM_NET:-10.211.0}
PREFIX=${PLC_SLURM_PREFIX:-plc}
BRIDGE=$PREFIX-br0
case $cmd in
    install) install_slurm ;;
    start)
        [ -n "$DIR" ] || { log "usage: $0 start DIR [NODES]"; exit 2; }
        DIR=$(realpath -m "$DIR")
        start "${3:-2}" ;;
    stop)
        [ -n "$DIR" ] || { log "usage: $0 stop DIR"; exit 2; }
        DIR=$(realpath -m "$DIR")
        stop ;;
    *) log "usage: $0 install | start DIR [NODES] | stop DIR"; exit 2 ;;
esac
