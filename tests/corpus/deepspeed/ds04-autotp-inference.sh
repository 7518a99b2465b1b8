#!/bin/bash
# case: DeepSpeed-Inference with AutoTP (--num_gpus 8, tp_size in a Python heredoc) on one node
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 -c 32
#SBATCH -N 1
#SBATCH --gpus-per-node=8
#SBATCH -c 32
#SBATCH -t 00:45:00

python - <<'PY' > /dev/null
import json, sys
print(json.dumps({"tensor_parallel": {"tp_size": 8}, "dtype": "fp16"}))
PY

cat > infer.py <<'PY'
import os
import deepspeed
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

name = "meta-llama/Llama-2-70b-hf"
world_size = int(os.getenv("WORLD_SIZE", "1"))
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)
engine = deepspeed.init_inference(model, tensor_parallel={"tp_size": world_size},
                                  dtype=torch.float16, replace_with_kernel_inject=False)
tok = AutoTokenizer.from_pretrained(name)
out = engine.module.generate(**tok("Slurm is", return_tensors="pt").to("cuda"), max_new_tokens=32)
print(tok.decode(out[0]))
PY

deepspeed --num_gpus 8 infer.py
