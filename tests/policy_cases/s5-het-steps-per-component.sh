#!/bin/bash
# case: het job whose steps each run on one component (TP=8 on 8 GPUs): no step spans components
# site: dgx-h100
# expect: accept
# not-rule: het-step
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
srun --het-group=0 python serve.py --tensor-parallel-size 8 &
srun --het-group=1 python serve.py --tensor-parallel-size 8 &
wait
