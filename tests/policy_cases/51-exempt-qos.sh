#!/bin/bash
# case: exempt QOS (command line)
# site: lab
# args: --qos=admin
# expect: accept
# rule: exempt
#SBATCH -N2 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 16
