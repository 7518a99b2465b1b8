#!/bin/bash
# case: DeepSpeed AutoTP size in the JSON config the script writes ({"tensor_parallel": {"autotp_size": 16}})
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
cat > ds_config.json <<EOF
{
  "train_micro_batch_size_per_gpu": 1,
  "zero_optimization": {"stage": 1},
  "tensor_parallel": {"autotp_size": 16}
}
EOF
srun deepspeed --num_gpus 8 train.py --deepspeed --deepspeed_config ds_config.json
