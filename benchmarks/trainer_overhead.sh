#!/usr/bin/env bash
# The trainer's overhead over gpt_step for the same config: both run in turns, three rounds,
# medians of 10 steps after 3 warm-up steps each (train_gpt: data loading and logging included).
#   bash benchmarks/trainer_overhead.sh [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
cfg="--layers 8 --d 256 --heads 4 --seq 256 --batch 4 --vocab 256 --threads ${1:-2}"
for r in 1 2 3; do
  build/benchmarks/gpt_step $cfg --steps 10 --warmup 3 |
    python3 -c 'import json, sys; print("gpt_step ", json.loads(sys.stdin.read())["step_s"])'
  build/examples/train_gpt $cfg --steps 13 --grad-clip 0 --json |
    python3 -c 'import json, statistics, sys
print("train_gpt", statistics.median([json.loads(l)["step_s"] for l in sys.stdin][3:]))'
done
