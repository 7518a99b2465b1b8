#!/bin/bash
# case: if/else picks TP by node count: TP=8 when SLURM_NNODES > 1 else TP=4 (both inside a node); 2 nodes
# site: dgx-h100
# expect: accept
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH -N2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH -t 03:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

if [ "$SLURM_NNODES" -gt 1 ]; then
    TP=8
    PP=$SLURM_NNODES
else
    TP=4
    PP=1
fi
MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "$MASTER:29500" \
    pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 32000 --micro-batch-size 1 --global-batch-size 128
