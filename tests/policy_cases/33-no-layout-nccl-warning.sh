#!/bin/bash
# case: a multi-node job with no layout: only the NCCL warning
# site: dgx-h100
# expect: accept
# warning: NCCL_IB_HCA
# source: none
#SBATCH -N4 --gpus-per-node=8
srun python train.py
