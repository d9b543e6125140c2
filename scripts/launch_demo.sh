#!/usr/bin/env bash
# The README's launch recipes, run on this one machine (docs/launch.md):
# 1. mpirun: a 2-rank job placed on a one-node cluster named localhost whose GPUs 0, 1, 3, 4, 6, 7 are busy; the
#    exported rankfile goes to a real `mpirun --rankfile`, each rank runs `placement bind` and prints what it got
#    (the GPUs are seats in the plan: this machine needs none, bind only sets the variables).
# 2. torchrun: a 4-rank job with `launcher: torchrun` on two hosts (both this machine); its torchrun script runs
#    under the real torchrun (torch 2.13.0, CPU, from the dev extra), one per host at once, and each worker runs
#    `placement bind` and prints what it got.
# Usage: scripts/launch_demo.sh [OUT_DIR]   (default out/launch-demo)
set -euo pipefail
cd "$(dirname "$0")/.."
P="${PLACEMENT:-.venv/bin/placement}"
out="${1:-out/launch-demo}"
mkdir -p "$out"
read -r first last < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')

cat > "$out/cluster.yaml" <<EOF
name: localhost
levels: [{name: node, bandwidth_gbps: 450, latency_us: 2}]
node_types:   # GPUs 0-3 close to CPU $first, 4-7 to CPU $last (a two-socket node in miniature)
  - {name: box, devices: 8, kind: H100, cpu_affinity: ['$first', '$first', '$first', '$first', '$last', '$last', '$last', '$last']}
hosts: [{name: localhost, node_type: box}]
EOF
cat > "$out/state.yaml" <<'EOF'
occupied: [{job: other, devices: [localhost/gpu0, localhost/gpu1, localhost/gpu3, localhost/gpu4, localhost/gpu6, localhost/gpu7]}]
EOF
cat > "$out/job.yaml" <<'EOF'
name: pair
ranks: 2
groups: [{members: [0, 1], bytes: 1.0e9}]
EOF

echo "== mpirun"
"$P" place "$out/cluster.yaml" "$out/job.yaml" --state "$out/state.yaml" --time-limit 2 --deterministic --output json --out "$out/result.json" 2>/dev/null
"$P" export "$out/result.json" --format rankfile --out "$out/rankfile" 2>/dev/null
echo "\$ cat $out/rankfile"
cat "$out/rankfile"
root=()
if [ "$(id -u)" -eq 0 ]; then root=(--allow-run-as-root); fi
probe='echo "rank $OMPI_COMM_WORLD_RANK: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES LOCAL_RANK=$LOCAL_RANK CPUs $(taskset -pc $$ | sed "s/.*: //")"'
echo "\$ mpirun --mca rmaps_rank_file_physical 1 --rankfile $out/rankfile -x PLACEMENT_HOST=localhost placement bind --placement $out/result.json -- sh -c '...'"
mpirun "${root[@]}" --mca rmaps_rank_file_physical 1 --rankfile "$out/rankfile" -x PLACEMENT_HOST=localhost \
  "$P" bind --placement "$out/result.json" -- sh -c "$probe" | sort

echo "== torchrun"
# Two hosts, node01 with GPUs 2 and 5 free and node02 with GPUs 1 and 6: the 4-rank job needs both. Both hosts are this
# machine, so each torchrun gets PLACEMENT_HOST (its host's line of the script, and bind's host check) and the
# master address node01 becomes 127.0.0.1. The two torchruns meet in torch's static rendezvous, as on two hosts.
P=$(realpath "$(command -v "$P")")
export PATH="$(dirname "$P"):$PATH"   # torchrun and placement, as the exported script calls them
command -v torchrun >/dev/null || { echo "torchrun not found: pip install torch==2.13.0 (the dev extra)" >&2; exit 1; }
cd "$out"   # the rest runs in the output directory, so the commands shown are the ones run
cat > cluster2.yaml <<EOF
name: two-hosts
levels: [{name: node, bandwidth_gbps: 450, latency_us: 2}, {name: fabric, bandwidth_gbps: 50, latency_us: 5}]
node_types:
  - {name: box, devices: 8, kind: H100, cpu_affinity: ['$first', '$first', '$first', '$first', '$last', '$last', '$last', '$last']}
hosts: [{name: node01, node_type: box}, {name: node02, node_type: box}]
EOF
cat > state2.yaml <<'EOF'
occupied:
  - {job: other, devices: [node01/gpu0, node01/gpu1, node01/gpu3, node01/gpu4, node01/gpu6, node01/gpu7,
                           node02/gpu0, node02/gpu2, node02/gpu3, node02/gpu4, node02/gpu5, node02/gpu7]}
EOF
cat > job2.yaml <<'EOF'
name: quad
ranks: 4
launcher: torchrun
groups: [{members: [0, 1, 2, 3], bytes: 1.0e9}]
EOF
echo "\$ placement place cluster2.yaml job2.yaml --state state2.yaml --time-limit 2 --deterministic --out result2.json | tail -1"
"$P" place cluster2.yaml job2.yaml --state state2.yaml --time-limit 2 --deterministic --out result2.json 2>/dev/null | tail -1
# torchrun's default port when it is free here, else any free port
port=$(python3 -c 'import socket
s = socket.socket()
try: s.bind(("127.0.0.1", 29500))
except OSError: s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
echo "\$ placement export result2.json --format torchrun --out torchrun.sh --placement-path result2.json --master-port $port"
"$P" export result2.json --format torchrun --out torchrun.sh --placement-path result2.json --master-port "$port" >/dev/null 2>&1
echo "\$ grep exec torchrun.sh"
grep exec torchrun.sh
echo "\$ sed -i 's/--master-addr=node01 /--master-addr=127.0.0.1 /' torchrun.sh   # node01 is this machine"
sed -i 's/--master-addr=node01 /--master-addr=127.0.0.1 /' torchrun.sh
probe='echo "rank $RANK (node rank $GROUP_RANK): CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE"'
echo "\$ for h in node01 node02; do PLACEMENT_HOST=\$h sh torchrun.sh sh -c '...' & done; wait"
pids=()
for h in node01 node02; do
  PLACEMENT_HOST=$h timeout 120 sh torchrun.sh sh -c "$probe" > "torchrun-$h.out" 2> "torchrun-$h.err" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
sort torchrun-node0?.out
[ "$rc" -eq 0 ] || { cat torchrun-node0?.err >&2; exit "$rc"; }
