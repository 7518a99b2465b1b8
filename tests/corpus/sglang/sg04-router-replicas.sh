#!/bin/bash
# case: sglang_router.launch_server with --dp-size 8 and --tp-size 1 on one node, then a benchmark via here-string
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH -t 3:00:00

python -m sglang_router.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dp-size 8 --tp-size 1 --port 30000 &
sleep 120
while read -r rate; do
    python -m sglang.bench_serving --backend sglang --port 30000 --request-rate "$rate" --num-prompts 500
done <<< "$(printf '%s\n' 1 4 16 64)"
