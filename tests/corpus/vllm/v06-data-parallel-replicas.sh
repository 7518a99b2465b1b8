#!/bin/bash
# case: one vLLM replica per node (TP=8 each) on 4 nodes behind a router; srun --ntasks-per-node=1 over the allocation
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=06:00:00

srun --ntasks-per-node=1 bash -c 'vllm serve mistralai/Mixtral-8x22B-Instruct-v0.1 \
    --tensor-parallel-size 8 --port 8000 --host 0.0.0.0 > vllm-$(hostname).log 2>&1' &
sleep 600
scontrol show hostnames "$SLURM_JOB_NODELIST" | sed 's/$/:8000/' > endpoints.txt
python router.py --endpoints endpoints.txt --port 9000
wait
