#!/bin/bash
# case: cyclic with one srun task per node that starts 8 ranks itself (torchrun): each node holds 8 consecutive ranks
# site: dgx-h100
# env: SLURM_DISTRIBUTION=cyclic
# expect: accept
# not-rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun -m cyclic torchrun --nnodes=2 --nproc-per-node=8 pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
