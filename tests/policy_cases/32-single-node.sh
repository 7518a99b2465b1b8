#!/bin/bash
# case: TP=16 on one node is not a spanning problem, but 8 GPUs cannot hold it
# site: dgx-h100
# expect: accept
# warning: not a multiple of TP x PP x CP
# not-rule: tp-exceeds-domain
#SBATCH -N1 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 16
