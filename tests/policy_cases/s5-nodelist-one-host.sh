#!/bin/bash
# case: -w naming one host twice is one node: TP=8 on its 8 GPUs stays inside it
# site: dgx-h100
# expect: accept
# not-rule: tp-exceeds-domain
# not-rule: tp-spans-nodes
#SBATCH -w gpu02,gpu02 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 8
