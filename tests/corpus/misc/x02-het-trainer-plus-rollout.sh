#!/bin/bash
# case: RL het job: 2-node Megatron trainer TP=8 PP=2 (component 0) + 1-node vLLM rollout TP=8 (component 1)
# site: dgx-h100
# expect: accept
# shape: het: [-N2 --gpus-per-node=8 --ntasks-per-node=1] + [-N1 --gpus-per-node=8]
#SBATCH -t 12:00:00
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8 --ntasks=1

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

srun --het-group=1 vllm serve /scratch/policy/latest --tensor-parallel-size 8 --port 8000 &
TRAIN_HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | head -n1)
srun --het-group=0 torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d \
    --rdzv_endpoint "$TRAIN_HEAD:29500" train_grpo.py \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 \
    --rollout-url "http://$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_1"):8000/v1"
