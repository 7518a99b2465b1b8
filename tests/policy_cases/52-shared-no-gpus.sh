#!/bin/bash
# case: no GPU request on a shared partition: a warning, nothing to place
# site: lab
# expect: accept
# warning: asks for no GPUs
# rule: no-gpus
#SBATCH -p shared -N2
srun python train.py --tensor-model-parallel-size 8
