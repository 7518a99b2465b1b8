#!/bin/bash
# case: vLLM offline batch inference from an embedded Python script (LLM(tensor_parallel_size=4)), one node, array of shards
# site: dgx-h100
# expect: accept
# shape: --array=0-15%4 -N1 --gpus-per-node=4
#SBATCH --array=0-15%4
#SBATCH --nodes=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=02:00:00
#SBATCH --output=shard-%a.log

SHARD=$SLURM_ARRAY_TASK_ID
python3 - "$SHARD" <<'PY'
import sys
from vllm import LLM, SamplingParams

shard = int(sys.argv[1])
prompts = [line.strip() for i, line in enumerate(open("/data/prompts.txt")) if i % 16 == shard]
llm = LLM(model="Qwen/Qwen2.5-32B-Instruct", tensor_parallel_size=4, max_model_len=8192)
outs = llm.generate(prompts, SamplingParams(temperature=0.7, max_tokens=512))
with open(f"/scratch/out/shard-{shard}.txt", "w") as f:
    for o in outs:
        f.write(o.outputs[0].text.replace("\n", " ") + "\n")
PY
