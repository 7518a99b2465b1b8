#!/bin/bash
# case: a usage() heredoc shows "TP=16 PP=1 sbatch -N2" as an example; the job runs TP=8 PP=2 on 2 nodes
# site: dgx-h100
# expect: accept
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH --time=06:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

usage() {
    cat <<'USAGE'
Submit with the defaults (TP=8, PP=2 on two nodes):
    sbatch train.sh
Bad idea on this cluster (tensor parallel over InfiniBand):
    TP=16 PP=1 sbatch -N2 train.sh
USAGE
}
[[ "${1:-}" == "--help" ]] && { usage; exit 0; }

TP=8
PP=2
MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "$MASTER:29500" \
    pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP \
    --num-layers 48 --hidden-size 8192 --num-attention-heads 64 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 32000 --micro-batch-size 1 --global-batch-size 256
