-- detect: everything the script, argv and environment say about the parallel layout, once
-- per job (cached for a script submitted again): values per parameter, the stamp, SLURMGPU_*,
-- the launcher, and where each value was seen.

local import = ...
local format, sub = string.format, string.sub
local concat = table.concat
local LATER_CHUNK_COST, WORK_MAX, limit_hit = import("budget", "LATER_CHUNK_COST", "WORK_MAX", "limit_hit")
local CHUNK, in_comment, in_line_comment, new_doc = import("lexer", "CHUNK", "in_comment", "in_line_comment", "new_doc")
local LAUNCHER_WORDS = import("names", "LAUNCHER_WORDS")
local MAX_VALUES, normalize, scan_doc = import("scan", "MAX_VALUES", "normalize", "scan_doc")
local search_code = import("shell", "search_code")
local find_stamp = import("stamp", "find_stamp")
local env_get, env_int, posnum = import("util", "env_get", "env_int", "posnum")


-- Whether a word appears in the code outside comments (first 64 occurrences per document, in
-- the scanned text; shell.search_code: within the word budget). nil: not found, but a search the
-- word budget stopped may have missed it (unknown; callers that only test truth take it as absent).
-- line_only: comments as each line alone shows them (for advice: no lexing of the lines before).
local function has_word(det, w, line_only)
  local outside = line_only and in_line_comment or in_comment
  local unknown = false
  for i = 1, #det.docs do
    local d = det.docs[i]
    local found = search_code(det, d, w, 64, function(h) return not outside(d, h) end)
    if found then return true end
    if found == nil then unknown = true end
  end
  if unknown then return nil end
  return false
end

-- The launcher a TP flag belongs to (by its spelling; nil if it names none).
local function family_of(det, rec)
  local name = normalize(rec.name)
  if name == "tensor-parallel-size" then return has_word(det, "sglang") and "sglang" or "vllm" end
  if name == "tp" or name == "tp-size" then
    if rec.short and name == "tp" then return "vllm" end
    return "sglang"
  end
  if name == "tensor-parallel-degree" then return "torchtitan" end
  if name == "tensor-model-parallel-size" or name == "model-parallel-size" then
    if rec.dotted or not rec.dash then return "nemo" end
    if has_word(det, "deepspeed") then return "deepspeed" end
    return "megatron"
  end
  return nil
end

local function launcher_of(det, job)
  if type(job.launcher) == "string" and job.launcher ~= "" then return job.launcher end
  local rec = det.tp_best or det.tp_token
  if det.source == "flags" and rec and not rec.env then
    local fam = family_of(det, rec)
    if fam then return fam end
  end
  for i = 1, #LAUNCHER_WORDS do
    if has_word(det, LAUNCHER_WORDS[i][1]) then return LAUNCHER_WORDS[i][2] end
  end
  return nil
end

local env_layout
-- SLURMGPU_TP / _PP / _DP / _CP / _EP of det.env, read only where a rule needs them (the flags
-- or the stamp settle most layouts). det.env is the environment of the job being judged: P.evaluate
-- sets it again for a detection taken from the cache, and forgets the values read for another job.
local ENV_KEYS = {tp = "SLURMGPU_TP", pp = "SLURMGPU_PP", dp = "SLURMGPU_DP", cp = "SLURMGPU_CP", ep = "SLURMGPU_EP"}
local ENV_ORDER = {"tp", "pp", "dp", "cp", "ep"}
env_layout = function(det)
  local el = det.env_layout
  if el == nil then
    el = false
    for i = 1, #ENV_ORDER do
      local v = env_int(det.env, ENV_KEYS[ENV_ORDER[i]])
      if v then
        if not el then el = {} end
        el[ENV_ORDER[i]] = v
      end
    end
    det.env_layout = el
  end
  return el or nil
end

-- The job's --segment: the request's, else SBATCH_SEGMENT_SIZE, else an #SBATCH --segment of the
-- script. Only multi-node NVLink domains (NVL72) ask, so other sites make no environment lookup.
local function segment_of(det, job)
  local seg = posnum(job.segment) or env_int(det.env, "SBATCH_SEGMENT_SIZE")
  if seg == nil and det.values.segment then
    for _, v in ipairs(det.values.segment) do
      if type(v) == "number" then seg = v; break end
    end
  end
  return seg
end

-- Largest command line read (Linux ARG_MAX is 2 MB by default); beyond it, truncated.
local ARGV_MAX_BYTES = 2 * 1024 * 1024
-- The most of a command line the work budget can scan (its first chunk at one unit a byte, the
-- rest at LATER_CHUNK_COST): a longer one is cut there, and its scan is incomplete anyway.
local ARGV_SCAN_MAX = CHUNK + math.floor((WORK_MAX - CHUNK) / LATER_CHUNK_COST)

-- Everything the script, argv and environment say about the parallel layout. Visible launcher
-- flags are the truth: the stamp and SLURMGPU_* only fill in what no flag shows.
local function detect(job)
  local env = job.env
  local det = {values = {}, unreadable = {}, docs = {}, truncated = false, work = 0, hits = 0, recs = {}}
  if type(job.script) == "string" and job.script ~= "" then
    det.docs[#det.docs + 1] = new_doc(job.script)
  end
  if type(job.argv) == "table" and job.argv[1] ~= nil then
    -- argv is not shell text: a "#" argument must not comment out the flags after it, and
    -- a newline inside an argument must not start a line (a forged stamp). Bounded in size.
    -- (no copy per argument: the joined text is read as an argument list, in_comment)
    -- (joined only as far as the work budget can scan: copying 2 MB alone costs ~1.4 ms)
    local parts, size = {}, 0
    for i = 1, #job.argv do
      local a = job.argv[i]
      if type(a) == "string" then
        size = size + #a + 1
        if size > ARGV_MAX_BYTES then limit_hit(det, "command line over 2 MB"); break end
        if size > ARGV_SCAN_MAX then
          local keep = #a - (size - ARGV_SCAN_MAX)
          if keep > 0 then parts[#parts + 1] = sub(a, 1, keep) end
          limit_hit(det, "work budget (script size)")
          break
        end
        parts[#parts + 1] = a
      end
    end
    if #parts > 0 then
      local d = new_doc(concat(parts, " "))
      d.argv = true -- a program's arguments: an "echo" there is no shell message line
      det.docs[#det.docs + 1] = d
    end
  end
  for i = 1, #det.docs do
    local d = det.docs[i]
    d.det = det
    scan_doc(det, d, env)
    if det.stamp == nil and not d.argv then det.stamp = find_stamp(d) end
  end
  if det.values_full then
    det.notes = {format("more than %d values of one parameter (the largest and smallest were kept)", MAX_VALUES)}
  end
  det.env = env
  if det.values.tp then
    det.source = "flags"
  elseif det.stamp then
    det.source = "stamp"
  elseif env_layout(det) and env_layout(det).tp then
    det.source = "env"
  else
    det.source = "none"
  end
  det.launcher = launcher_of(det, job)
  return det
end

-- A detection restricted to the values `keep(entry)` selects (entry: {kind, value, rec}):
-- one launcher's flags, or the flags on one het step's command line.
local function det_subset(det, keep)
  local sub_det = {values = {}, recs = {}}
  for i = 1, #det.recs do
    local e = det.recs[i]
    if keep(e) then
      local vals = sub_det.values[e.kind]
      if vals == nil then vals = {}; sub_det.values[e.kind] = vals end
      vals[#vals + 1] = e.value
      sub_det.recs[#sub_det.recs + 1] = e
      if e.kind == "tp" then
        if sub_det.tp_token == nil then sub_det.tp_token = e.rec end
        if type(e.value) == "number" and (sub_det.tp_best == nil or e.value > sub_det.tp_best.value) then
          sub_det.tp_best = e.rec
        end
      end
    end
  end
  return setmetatable(sub_det, {__index = det})
end

-- Detections of recent submissions, for a script submitted again (a sweep, a retry, the same
-- generated script with other options): slurmctld keeps one Lua state, and the scan is most of
-- a verdict's cost. The key is the script, the argv and the other job fields P.detect reads
-- (detect_key); an entry also records each environment variable P.detect
-- looked up and is used only while all of them still have the same values. Bounded: scripts
-- up to DETECT_CACHE_BYTES, at most DETECT_CACHE_ENTRIES (then the cache starts over).
-- Entries are found by the script string itself (interned: no copy, no hash of 10 KB), then by
-- the short key of the other fields. Few entries: Lua 5.1 hashes a long string from ~32 of its
-- bytes, so scripts of one length that differ elsewhere share a bucket of the string table,
-- and every new script Slurm hands over is compared byte by byte with each one still alive.
local DETECT_CACHE_ENTRIES = 8
local DETECT_CACHE_BYTES = 262144
local detect_cache, detect_cached_n = {}, 0
local last_big = nil

-- The job fields P.detect reads besides the script and the environment (keep in step with it).
local function detect_key(job)
  local key = tostring(job.launcher)
  local argv = job.argv
  if type(argv) == "table" and argv[1] ~= nil then
    local parts = {key}
    for i = 1, #argv do parts[#parts + 1] = tostring(argv[i]) end
    key = concat(parts, "\0")
  end
  return key
end

-- The recording environment of a cache miss: one shared metatable, the environment and the
-- record of reads kept in the proxy under keys no variable name can be (no closure per job).
local REC_ENV, REC_SEEN = {}, {}
local REC_ENV_MT = {__index = function(t, name)
  local v = env_get(rawget(t, REC_ENV), name)
  rawget(t, REC_SEEN)[name] = v or false
  return v
end}

-- The same arguments (each call brings a new table; the strings are interned: compared by address).
local function same_argv(a, b)
  local na, nb = type(a) == "table" and #a or 0, type(b) == "table" and #b or 0
  if na ~= nb then return false end
  for i = 1, na do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function detect_cached(job)
  local script = job.script
  local size = type(script) == "string" and #script or 0
  if type(job.argv) == "table" then
    for i = 1, #job.argv do
      size = size + #tostring(job.argv[i])
      if size > DETECT_CACHE_BYTES then break end
    end
  end
  local key = size <= DETECT_CACHE_BYTES and detect_key(job) or ""
  local env = job.env
  local hit
  if size > DETECT_CACHE_BYTES then
    -- a large script is remembered alone, for the next call with it: a het job's later
    -- components (the adapter hands them component 0's script), an update of its job
    local lb = last_big
    if lb and lb.script == script and same_argv(lb.argv, job.argv) then hit = lb end
  else
    local by_script = detect_cache[type(script) == "string" and script or ""]
    hit = by_script and by_script[key]
  end
  if hit then
    local same = true
    for name, value in pairs(hit.env) do
      local now = env_get(env, name) or false
      if now ~= value then same = false; break end
    end
    if same then
      -- the verdict's own word searches spend the same budget as the first time
      local d = hit.det
      d.work, d.hits, d.truncated, d.limit, d.limit_at = hit.work, hit.hits, hit.truncated, hit.limit, hit.limit_at
      d.word_bytes = hit.word_bytes
      return d
    end
  end
  -- a miss: run the scan with an environment that records what it reads
  local seen = {}
  local rec_env = nil
  if type(env) == "table" then rec_env = setmetatable({[REC_ENV] = env, [REC_SEEN] = seen}, REC_ENV_MT) end
  local real_env = job.env
  job.env = rec_env
  local ok, det = pcall(detect, job)
  job.env = real_env
  if not ok then error(det, 0) end
  local entry = {
    det = det, env = seen, work = det.work, hits = det.hits, word_bytes = det.word_bytes,
    truncated = det.truncated, limit = det.limit, limit_at = det.limit_at,
  }
  if size > DETECT_CACHE_BYTES then
    entry.script, entry.argv = script, job.argv
    last_big = entry
    return det
  end
  if detect_cached_n >= DETECT_CACHE_ENTRIES then detect_cache, detect_cached_n = {}, 0 end
  local skey = type(script) == "string" and script or ""
  local by_script = detect_cache[skey]
  if by_script == nil then by_script = {}; detect_cache[skey] = by_script end
  if by_script[key] == nil then detect_cached_n = detect_cached_n + 1 end
  by_script[key] = entry
  return det
end

return {
  detect = detect, detect_cached = detect_cached, det_subset = det_subset, family_of = family_of,
  has_word = has_word, env_layout = env_layout, segment_of = segment_of,
}
