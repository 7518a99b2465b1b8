#!/bin/bash
# case: NeMo 2.0 recipe driven by an embedded Python heredoc; llama3_70b recipe with TP=8 PP=4 on 4 nodes
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=08:00:00
#SBATCH --exclusive

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

cat > pretrain_llama70b.py <<'PY'
import nemo_run as run
from nemo.collections import llm


def configure():
    recipe = llm.llama3_70b.pretrain_recipe(
        name="llama3_70b_pretrain",
        dir="/scratch/nemo_runs",
        num_nodes=4,
        num_gpus_per_node=8,
    )
    recipe.trainer.strategy.tensor_model_parallel_size = 8
    recipe.trainer.strategy.pipeline_model_parallel_size = 4
    recipe.trainer.strategy.virtual_pipeline_model_parallel_size = 5
    recipe.trainer.strategy.context_parallel_size = 1
    recipe.trainer.max_steps = 1000
    return recipe


if __name__ == "__main__":
    run.run(configure(), executor=run.LocalExecutor(ntasks_per_node=8, launcher=None))
PY

srun --container-image=nvcr.io/nvidia/nemo:24.12 --container-mounts=/scratch:/scratch \
    --no-container-mount-home python pretrain_llama70b.py
