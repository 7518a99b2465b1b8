#!/bin/bash
# case: elastic torchrun with --nnodes=1:4 and -N 2-4 node range, DDP only, with a retry loop
# site: dgx-h100
# expect: accept
# shape: -N 2-4 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N 2-4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=08:00:00
#SBATCH --requeue

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)

for attempt in 1 2 3; do
    if srun torchrun --nnodes=1:4 --nproc_per_node=8 --max-restarts=3 \
        --rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$HEAD:29500" \
        train_elastic.py --checkpoint /scratch/elastic.pt; then
        break
    fi
    echo "attempt $attempt failed, retrying" >&2
    sleep 30
done
