#!/bin/bash
# case: vLLM with TP sized ${SLURM_GPUS_ON_NODE} on a single 4-GPU Perlmutter node
# site: perlmutter
# expect: accept
# shape: -N1 -C gpu --gpus-per-node=4
#SBATCH -N 1
#SBATCH -C gpu
#SBATCH --gpus-per-node=4
#SBATCH -q regular
#SBATCH -t 01:00:00

module load python
conda activate vllm
vllm serve Qwen/Qwen2.5-14B-Instruct --tensor-parallel-size ${SLURM_GPUS_ON_NODE} --port 8000 &
sleep 300
python eval_client.py --base-url http://localhost:8000/v1
