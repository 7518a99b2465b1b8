#!/bin/bash
# case: apptainer exec --bind mounts a directory, it binds no CPU: the warning stays
# site: lab-numa
# expect: accept
# rule: unbound-ranks
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1 NCCL_SOCKET_IFNAME=bond0
srun apptainer exec --nv --bind /scratch img.sif python train.py --tensor-model-parallel-size 8
