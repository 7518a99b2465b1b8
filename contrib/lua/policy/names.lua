-- names: the vocabulary of the scan. Option names of every launcher and the parameter each
-- sets, the environment names a command prefix may set, the keywords the scan anchors on with
-- the bytes a relevant hit may sit between, and the launcher words.

local find, byte = string.find, string.byte


-- Option names (leading -/+ stripped, last dotted part, '_' -> '-') -> parameter.
local NAMES = {
  ["tensor-model-parallel-size"] = "tp", ["tensor-parallel-size"] = "tp",
  ["tensor-parallel-degree"] = "tp", ["tp"] = "tp", ["tp-size"] = "tp",
  ["pipeline-model-parallel-size"] = "pp", ["pipeline-parallel-size"] = "pp",
  ["pipeline-parallel-degree"] = "pp", ["pp"] = "pp", ["pp-size"] = "pp",
  ["context-parallel-size"] = "cp", ["context-parallel-degree"] = "cp", ["cp"] = "cp", ["cp-size"] = "cp",
  ["expert-model-parallel-size"] = "ep", ["expert-parallel-size"] = "ep",
  ["expert-parallel-degree"] = "ep", ["ep"] = "ep", ["ep-size"] = "ep",
  ["data-parallel-size"] = "dp", ["dp"] = "dp", ["dp-size"] = "dp",
  ["model-parallel-size"] = "tp", -- Megatron's spelling before tensor-/pipeline- split
  -- accelerate's Megatron-LM plugin (config key megatron_lm_tp_degree, flag --megatron_lm_tp_degree)
  ["megatron-lm-tp-degree"] = "tp", ["megatron-lm-pp-degree"] = "pp",
  ["nproc-per-node"] = "nproc", ["num-gpus"] = "nproc",
  ["ntasks-per-node"] = "ntasks", ["segment"] = "segment",
}
-- Names that only count as a flag (with a leading dash), never as a bare key=value.
local DASH_ONLY = {
  ["tp"] = true, ["tp-size"] = true, ["pp"] = true, ["pp-size"] = true, ["cp"] = true,
  ["cp-size"] = true, ["ep"] = true, ["ep-size"] = true, ["dp"] = true, ["dp-size"] = true,
  ["nproc-per-node"] = true, ["num-gpus"] = true, ["ntasks-per-node"] = true, ["segment"] = true,
}
-- Anchors of the scan, with pairwise distinct first bytes: a plain find stops at every byte equal
-- to its needle's first, so together the needles stop at most once per byte of text (bounded
-- cost, whatever the text). The token around a hit is read from the text, not from the needle.
local KEYWORDS = {"arallel", "tp", "pp", "cp", "ep", "dp", "nproc", "gpus", "ks-per-node", "segment",
                  "TP", "PP", "ARALLEL"}
-- Environment names given as a command prefix (TP=16 ./train.sh): visible values too.
-- The byte a relevant hit of each keyword follows (a cheap first test: "step" is no "--ep").
local KEY_PREV = {arallel = "p", tp = "-_", pp = "-_", cp = "-", ep = "-", dp = "-", gpus = "-_",
                  ["ks-per-node"] = "s",
                  segment = "-", TP = false, PP = false, ARALLEL = "P"}
-- KEY_PREV as byte sets (the test runs once per keyword hit).
local KEY_PREV_BYTES = {}
for key, want in pairs(KEY_PREV) do
  if want then
    local set = {}
    for i = 1, #want do set[byte(want, i)] = true end
    KEY_PREV_BYTES[key] = set
  else
    KEY_PREV_BYTES[key] = want
  end
end
local ENV_NAMES = {
  TP = "tp", TP_SIZE = "tp", TENSOR_PARALLEL_SIZE = "tp", TENSOR_MODEL_PARALLEL_SIZE = "tp",
  MODEL_PARALLEL_SIZE = "tp", PP = "pp", PP_SIZE = "pp", PIPELINE_PARALLEL_SIZE = "pp",
  PIPELINE_MODEL_PARALLEL_SIZE = "pp",
}
-- The bytes a relevant hit of each keyword may be followed by, from NAMES ('_' also stands
-- for '-') and ENV_NAMES; [0]: the token may end there. A second cheap test before any token is
-- read: "tensor parallel", "--cpus-per-task" or "--adam-eps" stop the scan but cost no read.
local KEY_NEXT = {}
local function key_next_add(key, name, dash_both)
  local set = KEY_NEXT[key]
  local p = 1
  while true do
    local h = find(name, key, p, true)
    if h == nil then return end
    local c = byte(name, h + #key) or 0
    set[c] = true
    if dash_both and c == 45 then set[95] = true end
    p = h + 1
  end
end
for _, key in ipairs(KEYWORDS) do
  KEY_NEXT[key] = {}
  for name in pairs(NAMES) do key_next_add(key, name, true) end
  for name in pairs(ENV_NAMES) do key_next_add(key, name, false) end
end
local LAUNCHER_WORDS = {
  {"sglang", "sglang"}, {"vllm", "vllm"}, {"torchtitan", "torchtitan"}, {"deepspeed", "deepspeed"},
  {"nemo", "nemo"}, {"megatron", "megatron"}, {"accelerate launch", "accelerate"},
  {"torchrun", "torchrun"}, {"torch.distributed.run", "torchrun"}, {"srun", "srun"},
}

-- Option-name characters: letters, digits, - . _ +
local OPTCH = {}
for c = 48, 57 do OPTCH[c] = true end
for c = 65, 90 do OPTCH[c] = true end
for c = 97, 122 do OPTCH[c] = true end
OPTCH[45] = true; OPTCH[46] = true; OPTCH[95] = true; OPTCH[43] = true

return {
  NAMES = NAMES, DASH_ONLY = DASH_ONLY, KEYWORDS = KEYWORDS, KEY_PREV_BYTES = KEY_PREV_BYTES,
  ENV_NAMES = ENV_NAMES, KEY_NEXT = KEY_NEXT, LAUNCHER_WORDS = LAUNCHER_WORDS, OPTCH = OPTCH,
}
