#!/bin/bash
# case: NeMo Hydra override model.tensor_model_parallel_size=16
# site: dgx-h100
# expect: reject
# message: TP=16
# launcher: nemo
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python megatron_gpt_pretraining.py trainer.num_nodes=2 trainer.devices=8 \
    model.tensor_model_parallel_size=16 model.pipeline_model_parallel_size=1
