#!/bin/bash
# case: vllm serve Llama-3-70B on one node, --tensor-parallel-size 8, with a health-check loop
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 --ntasks=1 -c 64
#SBATCH --job-name=vllm-70b
#SBATCH -N 1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=8
#SBATCH -c 64
#SBATCH --time=08:00:00

PORT=8000
vllm serve meta-llama/Meta-Llama-3-70B-Instruct \
    --tensor-parallel-size 8 \
    --max-model-len 8192 \
    --gpu-memory-utilization 0.92 \
    --port $PORT &
SERVER_PID=$!

until curl -sf "http://localhost:$PORT/health" > /dev/null; do
    sleep 10
done
echo "server up on $(hostname):$PORT"
python bench_client.py --url "http://localhost:$PORT/v1" --num-prompts 1000
kill $SERVER_PID
