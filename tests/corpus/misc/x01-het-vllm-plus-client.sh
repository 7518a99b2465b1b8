#!/bin/bash
# case: het job: component 0 one GPU node serving vLLM TP=8, component 1 a CPU client; srun --het-group per component
# site: dgx-h100
# expect: accept
# shape: het: [-N1 --gpus-per-node=8] + [-N1 -n4 -c4, no GPUs]
#SBATCH --job-name=serve-and-load
#SBATCH --time=02:00:00
#SBATCH -N1 --gpus-per-node=8 --ntasks=1
#SBATCH hetjob
#SBATCH -N1 --ntasks=4 --cpus-per-task=4

srun --het-group=0 vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8 --port 8000 &
sleep 240
SERVER=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | head -n1)
srun --het-group=1 python load_test.py --url "http://$SERVER:8000/v1" --concurrency 64
