#!/bin/bash
# case: a launcher set to warn does not make an unchecked (off) partition checked: the more lenient mode wins
# site: lab
# expect: accept
# no-warnings
# not-rule: tp-exceeds-domain
#SBATCH -p free -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
vllm serve meta-llama/Llama-3.1-405B -tp 16
