#!/usr/bin/env bash
# The README's launch recipes, run on this one machine (docs/launch.md):
# 1. mpirun: a 2-rank job placed on a one-node cluster named localhost whose GPUs 0, 1, 3, 4, 6, 7 are busy; the
#    exported rankfile goes to a real `mpirun --rankfile`, each rank runs `placement bind` and prints what it got
#    (the GPUs are seats in the plan: this machine needs none, bind only sets the variables).
# 2. torchrun: a job with `launcher: torchrun` on the example cluster; its torchrun script, and `placement bind` as
#    a torchrun worker runs it (torch is not installed here, so the worker's variables are set by hand).
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
"$P" place examples/h100-256.yaml examples/tp2-pp4-dp4-torchrun.yaml --state examples/h100-256-busy.yaml \
  --time-limit 5 --deterministic --out "$out/torchrun-result.json" 2>/dev/null | tail -1
"$P" export "$out/torchrun-result.json" --format torchrun --out "$out/torchrun.sh" --placement-path result.json 2>/dev/null
echo "\$ grep exec $out/torchrun.sh | head -2"
grep exec "$out/torchrun.sh" | head -2
host=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["result"]["mapping"][9]["host"])' "$out/torchrun-result.json")
echo "\$ RANK=9 LOCAL_RANK=1 WORLD_SIZE=32 PLACEMENT_HOST=$host placement bind -v -- python3 -c '...'   # torchrun's worker 9"
RANK=9 LOCAL_RANK=1 WORLD_SIZE=32 PLACEMENT_HOST="$host" "$P" bind --placement "$out/torchrun-result.json" -v -- \
  python3 -c 'import os; print("worker", os.environ["RANK"], "CUDA_VISIBLE_DEVICES", os.environ["CUDA_VISIBLE_DEVICES"], "LOCAL_RANK", os.environ["LOCAL_RANK"])'
