#!/bin/bash
# case: PyTorch Lightning under srun (one task per GPU, Trainer(num_nodes=4, devices=8)), a Python heredoc writes the entry point
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=8 --gres=gpu:8
#SBATCH -N 4
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --time=0-12:00:00
#SBATCH --signal=SIGUSR1@90

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

cat > lit_train.py <<'PY'
import lightning as L
from model import LitGPT, DataModule

trainer = L.Trainer(accelerator="gpu", devices=8, num_nodes=4, strategy="fsdp",
                    precision="bf16-mixed", max_steps=50_000)
trainer.fit(LitGPT(n_layer=24, n_head=16, n_embd=2048), datamodule=DataModule("/data/owt"))
PY

srun python lit_train.py
