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
  -- Megatron's --expert-tensor-parallel-size (NeMo: model.expert_tensor_parallel_size); unset: TP
  ["expert-tensor-parallel-size"] = "etp",
  ["model-parallel-size"] = "tp", -- Megatron's spelling before tensor-/pipeline- split
  -- accelerate's Megatron-LM plugin (config key megatron_lm_tp_degree, flag --megatron_lm_tp_degree)
  ["megatron-lm-tp-degree"] = "tp", ["megatron-lm-pp-degree"] = "pp",
  ["nproc-per-node"] = "nproc", ["num-gpus"] = "nproc",
  ["ntasks-per-node"] = "ntasks", ["segment"] = "segment",
  -- DeepSpeed AutoTP ({"tensor_parallel": {"autotp_size": N}} in a config or a JSON flag value)
  ["autotp-size"] = "tp",
  -- accelerate's ParallelismConfig (flag --parallelism_config_tp_size, or the config YAML key)
  ["parallelism-config-tp-size"] = "tp", ["parallelism-config-cp-size"] = "cp",
}
-- Prefixes argparse resolves to a whole option when they are unambiguous among a parser's
-- options (allow_abbrev, the default): {option, shortest prefix, parameter}. From the recorded
-- catalogues of SGLang and vLLM (tests/data/contract) and the parsers of torchrun and the
-- DeepSpeed launcher; tests/test_policy_scan.py recomputes it from them. Megatron-LM and
-- accelerate launch refuse abbreviations (allow_abbrev=False).
local ABBREV = {
  {"tensor-parallel-size", 2, "tp"}, {"tp-size", 2, "tp"}, {"pipeline-parallel-size", 2, "pp"},
  {"pp-size", 4, "pp"}, {"data-parallel-size", 2, "dp"}, {"dp-size", 2, "dp"},
  {"expert-parallel-size", 8, "ep"}, {"ep-size", 4, "ep"}, {"nproc-per-node", 2, "nproc"}, {"num-gpus", 5, "nproc"},
}
-- Names that only count as a flag (with a leading dash), never as a bare key=value.
local DASH_ONLY = {
  ["tp"] = true, ["tp-size"] = true, ["pp"] = true, ["pp-size"] = true, ["cp"] = true,
  ["cp-size"] = true, ["ep"] = true, ["ep-size"] = true, ["dp"] = true, ["dp-size"] = true,
  ["nproc-per-node"] = true, ["num-gpus"] = true, ["ntasks-per-node"] = true, ["segment"] = true,
}
-- The parameter an option name stands for: its own, or the one it abbreviates (dashed names).
-- (the abbreviations a dashed name stands for, remembered: the same option names come back in
-- every script; at most ABBREV_MEMO_MAX names, then the memo starts over)
local ABBREV_MEMO_MAX = 4096
local abbrev_memo, abbrev_memo_n = {}, 0
local function name_kind(name, dash)
  local kind = NAMES[name]
  if kind or not dash then return kind end
  local m = abbrev_memo[name]
  if m ~= nil then return m or nil end
  m = false
  for i = 1, #ABBREV do
    local a = ABBREV[i]
    if #name >= a[2] and #name < #a[1] and a[1]:sub(1, #name) == name then m = a[3]; break end
  end
  if abbrev_memo_n >= ABBREV_MEMO_MAX then abbrev_memo, abbrev_memo_n = {}, 0 end
  abbrev_memo[name], abbrev_memo_n = m, abbrev_memo_n + 1
  return m or nil
end
-- Anchors of the scan, with pairwise distinct first bytes: a plain find stops at every byte equal
-- to its needle's first, so together the needles stop at most once per byte of text (bounded
-- cost, whatever the text). The token around a hit is read from the text, not from the needle.
-- The shortest abbreviations --te, --pi, --np are found by one needle, "--", whose next two bytes
-- name the key (DASH_KEYS: three needles of one first byte would stop three times on every '-');
-- "num" finds --num_g.
local KEYWORDS = {"arallel", "tp", "pp", "cp", "ep", "dp", "--", "gpus", "ks-per-node", "segment",
                  "TP", "PP", "ARALLEL", "num"}
local DASH_KEYS = {"-np", "-te", "-pi"}
local DASH_KEY_AT = {} -- [second byte * 256 + third byte] -> the key a "--" hit is
local DASH_SECOND = {} -- the bytes one of them has after the dashes (a quick first test)
for _, k in ipairs(DASH_KEYS) do
  DASH_KEY_AT[byte(k, 2) * 256 + byte(k, 3)] = k
  DASH_SECOND[byte(k, 2)] = true
end
-- (and the anchors of a data here-document's config keys, scan.lua CONFIG_KEYWORDS)
local ALL_KEYWORDS = {"size", "degree"}
for i = 1, #KEYWORDS do
  if KEYWORDS[i] ~= "--" then ALL_KEYWORDS[#ALL_KEYWORDS + 1] = KEYWORDS[i] end
end
for i = 1, #DASH_KEYS do ALL_KEYWORDS[#ALL_KEYWORDS + 1] = DASH_KEYS[i] end
-- Environment names given as a command prefix (TP=16 ./train.sh): visible values too.
-- The byte a relevant hit of each keyword follows (a cheap first test: "step" is no "--ep").
-- (A blank, newline or quote before tp/pp/cp/ep/dp: a YAML or JSON key, `tp-size: 16`; "o": autotp.)
local KEY_PREV = {arallel = "p", tp = "-_o \t\n\"", pp = "-_ \t\n\"", cp = "-_ \t\n\"", ep = "- \t\n\"",
                  dp = "- \t\n\"", gpus = "-_",
                  ["ks-per-node"] = "s", ["-np"] = "-", ["-te"] = "-", ["-pi"] = "-", num = "-",
                  segment = "-", TP = false, PP = false, ARALLEL = "P", size = "-_", degree = "-_"}
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
-- KEY_ABBR[key][c]: the texts one of which must come right before a hit when only an
-- abbreviation may go on with byte c ("--tensor-p" before "arallel" and a blank), so that
-- "--sequence-parallel" or "data-parallel replicas" stay near misses that cost no token read.
local KEY_ABBR = {}
local function add_stem(key, c, stem)
  local by = KEY_ABBR[key] or {}
  KEY_ABBR[key] = by
  local stems = by[c] or {}
  by[c] = stems
  for j = 1, #stems do if stems[j] == stem then return end end
  stems[#stems + 1] = stem
end
for _, key in ipairs(ALL_KEYWORDS) do
  KEY_NEXT[key] = {}
  local lead = key:sub(1, 1) == "-" and "-" or "" -- a needle with its dash matches "-" .. name
  for name in pairs(NAMES) do key_next_add(key, lead .. name, true) end
  for name in pairs(ENV_NAMES) do key_next_add(key, name, false) end
  local full = KEY_NEXT[key]
  for i = 1, #ABBREV do -- every prefix an abbreviation may end at
    local a = ABBREV[i]
    for n = a[2], #a[1] - 1 do
      local pre = "--" .. a[1]:sub(1, n)
      local h = pre:find(key, 2, true)
      while h do
        local c = pre:byte(h + #key) or 0
        for _, cc in ipairs(c == 45 and {45, 95} or {c}) do
          if not full[cc] then
            local stem = pre:sub(1, h - 1)
            add_stem(key, cc, stem)
            add_stem(key, cc, "--" .. stem:sub(3):gsub("%-", "_"))
          end
        end
        h = pre:find(key, h + 1, true)
      end
    end
  end
end
-- "parallelism" (prose everywhere) is no hit of "arallel": the accelerate names that start with it
-- (parallelism-config-tp-size, ...-cp-size) are found by their "tp" or "cp".
KEY_NEXT.arallel[105] = nil

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
  NAMES = NAMES, DASH_ONLY = DASH_ONLY, ABBREV = ABBREV, name_kind = name_kind, KEYWORDS = KEYWORDS,
  DASH_KEY_AT = DASH_KEY_AT, DASH_SECOND = DASH_SECOND,
  KEY_PREV_BYTES = KEY_PREV_BYTES,
  ENV_NAMES = ENV_NAMES, KEY_NEXT = KEY_NEXT, KEY_ABBR = KEY_ABBR, LAUNCHER_WORDS = LAUNCHER_WORDS, OPTCH = OPTCH,
}
