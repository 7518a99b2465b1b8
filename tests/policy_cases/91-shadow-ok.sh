#!/bin/bash
# case: shadow mode: a good layout is an ok verdict (nothing to tell, nothing would be told)
# site: lab-shadow
# expect: accept
# no-warnings
# would: accept
# not-rule: tp-exceeds-domain
# layout: tp=8 pp=2
#SBATCH -p h100 -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
