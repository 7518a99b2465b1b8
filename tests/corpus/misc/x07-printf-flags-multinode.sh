#!/bin/bash
# case: a 2-node TP=8 PP=2 job whose echo/printf log lines quote --tensor-model-parallel-size 16 and TP=16 as text
# site: dgx-h100
# expect: accept
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH --time=06:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

echo "reminder: --tensor-model-parallel-size 16 spans nodes here; this run uses 8 x 2"
printf 'previous attempt (TP=16) was 40%% slower\n'

MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "$MASTER:29500" \
    pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 \
    --num-layers 48 --hidden-size 8192 --num-attention-heads 64 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 32000 --micro-batch-size 1 --global-batch-size 256
