#!/bin/bash
# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: issue 16 class 1: a hand-written stamp saying TP=8 does not downgrade vLLM's visible TP=16 on 2x8
# site: dgx-h100
# expect: reject
# message: TP=16
# warning: stamp says TP=8
# rule: tp-exceeds-domain
# source: flags
# launcher: vllm
# layout: tp=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun vllm serve meta-llama/Llama-3.1-405B --tensor-parallel-size 16
