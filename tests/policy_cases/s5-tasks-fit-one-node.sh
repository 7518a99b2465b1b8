#!/bin/bash
# case: -n 8 -c 16 (128 CPUs) fits one 224-CPU node: TP=8 is a one-node job
# site: dgx-h100
# expect: accept
# not-rule: tp-exceeds-domain
#SBATCH -n 8 -c 16 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 8
