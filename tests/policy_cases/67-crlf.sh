#!/bin/bash
# case: CRLF line endings
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
srun python train.py \
  --tensor-model-parallel-size 16
