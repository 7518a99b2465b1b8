#!/bin/bash
# case: --gpus=16 with --nodes=2 on 8-GPU nodes is 8 per node: TP=16 spans them
# site: dgx-h100
# args: --gpus=16 --nodes=2
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
