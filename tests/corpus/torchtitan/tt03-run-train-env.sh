#!/bin/bash
# case: torchtitan's run_train.sh style with NGPU/CONFIG_FILE env and extra overrides, one node, TP=2
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH -t 2:00:00

set -ex
NGPU=${NGPU:-"8"}
export LOG_RANK=${LOG_RANK:-0}
CONFIG_FILE=${CONFIG_FILE:-"./torchtitan/models/llama3/train_configs/debug_model.toml"}
overrides=""
if [ $# -ne 0 ]; then
    overrides="$*"
fi

PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" \
torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d --rdzv_endpoint="localhost:0" \
    --local-ranks-filter ${LOG_RANK} --role rank --tee 3 \
    -m torchtitan.train --job.config_file ${CONFIG_FILE} \
    --parallelism.tensor_parallel_degree=2 --parallelism.enable_async_tensor_parallel \
    $overrides
