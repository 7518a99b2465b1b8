#!/bin/bash
# case: the same job with torchrun --numa-binding (apptainer's --bind is not a CPU binding): no warning
# site: lab-numa
# expect: accept
# no-warnings
# not-rule: unbound-ranks
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_1 NCCL_SOCKET_IFNAME=bond0
srun apptainer exec --nv --bind /scratch img.sif torchrun --nnodes=2 --nproc-per-node=8 --numa-binding=node \
    train.py --tensor-model-parallel-size 8
