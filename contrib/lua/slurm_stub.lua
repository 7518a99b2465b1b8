-- slurmgpu_stub: run a rendered job_submit.lua / cli_filter.lua outside slurmctld, the way
-- Slurm 22.05 calls it. Used by `slurmgpu check` (through lupa, or the lua5.1 binary) and by
-- the tests. It mirrors 22.05 where that changes outcomes:
--  * the `slurm` table has only the eight ESLURM_* names 22.05 exports;
--  * log functions are string.format(unpack({...})), so a nil argument or a stray '%' raises;
--  * job_desc is a proxy: pairs() yields nothing, unset numbers read as NO_VAL/NO_VAL16,
--    argv is 0-indexed, the environment is readable for batch jobs only, writing nil raises.
-- Lua 5.1; defines the globals `slurm` and `slurmgpu_stub`.

local S = {user_msgs = {}, log = {}}

local NO_VAL, NO_VAL16 = 4294967294, 65534

local unpack = unpack or table.unpack -- 5.1 / 5.2+ (the policy cases also run under 5.3 and 5.4)

local function fmt(...)
  return string.format(unpack({...}))
end

local function logger(level)
  return function(...)
    local line = fmt(...)
    S.log[#S.log + 1] = level .. ": " .. line
  end
end

slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1,
  NO_VAL = NO_VAL, NO_VAL16 = NO_VAL16, NO_VAL64 = 18446744073709551614,
  INFINITE = 4294967295, INFINITE16 = 65535, INFINITE64 = 18446744073709551615,
  MEM_PER_CPU = 9223372036854775808,
  ESLURM_ACCESS_DENIED = 2002, ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_INVALID_ACCOUNT = 2045,
  ESLURM_INVALID_LICENSES = 2048, ESLURM_INVALID_NODE_COUNT = 2006, ESLURM_INVALID_TIME_LIMIT = 2051,
  ESLURM_JOB_MISSING_SIZE_SPECIFICATION = 2008, ESLURM_MISSING_TIME_LIMIT = 8000,
  log_info = logger("info"), log_verbose = logger("verbose"), log_debug = logger("debug"),
  log_debug2 = logger("debug2"), log_debug3 = logger("debug3"), log_debug4 = logger("debug4"),
  log_error = logger("error"),
  error = function(msg) S.log[#S.log + 1] = "error: " .. msg end,
  log_user = function(...) S.user_msgs[#S.user_msgs + 1] = fmt(...) end,
  user_msg = function(msg) S.user_msgs[#S.user_msgs + 1] = msg end,
}

local NUM16 = {ntasks_per_node = true, sockets_per_node = true, shared = true, ntasks_per_gpu = true,
               ntasks_per_tres = true, cpus_per_task = true, segment_size = true}
local NUM32 = {min_nodes = true, max_nodes = true, num_tasks = true, het_job_offset = true, min_cpus = true}

-- A job_desc proxy from a plain table of 22.05 field values (argv as a 1-based list).
function S.job_desc(d)
  local fields = {}
  for k, v in pairs(d) do fields[k] = v end
  local env = d.environment
  fields.environment = nil
  local hetoff = d.het_job_offset
  local batch = d.script ~= nil or (hetoff ~= nil and hetoff ~= NO_VAL)
  local envp = nil
  if env ~= nil then
    envp = setmetatable({}, {
      __index = function(_, k)
        if not batch then
          S.log[#S.log + 1] = "error: job_submit/lua: environment only accessible for batch jobs"
          return nil
        end
        return env[k]
      end,
      __newindex = function(_, k, v) env[k] = v end,
    })
  end
  local argv = {}
  local args = d.argv or {}
  for i = 1, #args do argv[i - 1] = args[i] end
  fields.argv = nil
  local argc = #args
  return setmetatable({}, {
    __index = function(_, k)
      if k == "environment" then return envp end
      if k == "argv" then if argc > 0 then return argv end return nil end
      if k == "argc" then return argc end
      if k == "gres" then return fields.tres_per_node end
      local v = fields[k]
      if v == nil then
        if NUM16[k] then return NO_VAL16 end
        if NUM32[k] then return NO_VAL end
      end
      return v
    end,
    __newindex = function(_, k, v)
      if v == nil then error("bad argument #3 to '__newindex' (string expected, got nil)") end
      if k == "segment_size" and not S.segment_writable then
        -- before 25.11 _set_job_field does not know segment_size: it logs and drops the write
        S.log[#S.log + 1] = "error: _set_job_field: unrecognized field: segment_size"
        return
      end
      fields[k] = v
    end,
  })
end

-- Slurm 25.11+ lets job_submit/lua write job_desc.segment_size (the local 22.05/24.11 do not).
S.segment_writable = false

-- part_list: plain table keyed by name; values are proxies.
function S.part_list(parts)
  local out = {}
  for i = 1, #(parts or {}) do
    local p = parts[i]
    out[p.name] = setmetatable({}, {__index = function(_, k) return p[k] end})
  end
  return out
end

-- cli_filter options: strings; unset numbers read "-2".
function S.cli_options(o)
  local argv = o.argv
  return setmetatable({}, {__index = function(_, k)
    if k == "argv" then return argv end
    local v = o[k]
    if v == nil and (k == "ntasks-per-node" or k == "sockets-per-node") then return "-2" end
    return v
  end})
end

function S.reset()
  S.user_msgs = {}
  S.log = {}
end

-- The verdict table for a desc (job_submit.lua's own evaluate_desc).
function S.verdict(desc, parts, uid)
  S.reset()
  local v = slurmgpu_filter.evaluate_desc(S.job_desc(desc), S.part_list(parts), uid)
  return v
end

-- A het job's components, one after the other in one Lua state as slurmctld submits them;
-- like slurmctld, the first rejected component ends the submission. A list of verdicts.
function S.verdicts(descs, parts, uid)
  S.reset()
  local out = {}
  for i = 1, #descs do
    local v = slurmgpu_filter.evaluate_desc(S.job_desc(descs[i]), S.part_list(parts), uid)
    out[#out + 1] = S.export(v)
    if v.decision ~= "accept" then break end
  end
  return out
end

-- What slurmctld would get: slurm_job_submit's return value and the user messages.
-- The fourth value is the AdminComment the filter left on the job_desc (nil: none).
function S.submit(desc, parts, uid)
  S.reset()
  S.last_desc = S.job_desc(desc) -- what the controller keeps (segment_size, admin_comment written)
  local rc = slurm_job_submit(S.last_desc, S.part_list(parts), uid)
  return rc, S.user_msgs, S.log, S.last_desc.admin_comment
end

---------------------------------------------------------------------------
-- minimal JSON for the lua5.1-binary path

local function jstr(s)
  s = string.gsub(s, '[%c"\\\128-\255]', function(c)
    local b = string.byte(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    if c == "\n" then return "\\n" end
    return string.format("\\u%04x", b)
  end)
  return '"' .. s .. '"'
end

local function json(v)
  local t = type(v)
  if t == "string" then return jstr(v) end
  if t == "number" then
    if v == math.floor(v) and v > -1e15 and v < 1e15 then return string.format("%d", v) end
    return string.format("%.17g", v)
  end
  if t == "boolean" then return tostring(v) end
  if t == "nil" then return "null" end
  if t == "table" then
    if #v > 0 or next(v) == nil then
      local parts = {}
      for i = 1, #v do parts[i] = json(v[i]) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do if type(k) == "string" then keys[#keys + 1] = k end end
    table.sort(keys)
    local parts = {}
    for i = 1, #keys do parts[i] = jstr(keys[i]) .. ":" .. json(v[keys[i]]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return jstr(tostring(v))
end
S.json = json

-- The filter's audit words (policy.lua's P, reached through the global the adapter sets).
-- (nil when only policy.lua is loaded, without an adapter)
local function P_word(v) return slurmgpu_filter and slurmgpu_filter.policy.verdict_word(v) end
local function P_token(v) return slurmgpu_filter and slurmgpu_filter.policy.audit_token(v) end

-- Verdict fields that leave Lua (plain data only).
function S.export(v)
  return {decision = v.decision, code = v.code, messages = v.messages, warnings = v.warnings,
          layout = v.layout, source = v.source, launcher = v.launcher, partitions = v.partitions,
          rules = v.rules, mode = v.mode, exempt = v.exempt, internal_error = v.internal_error,
          unknown_partitions = v.unknown_partitions, notes = v.notes, repair_segment = v.repair_segment,
          shadow_messages = v.shadow_messages, shadow_warnings = v.shadow_warnings, would = v.would,
          verdict = P_word(v), audit = P_token(v), shapes = v.shapes, judged_at = v.judged_at}
end

slurmgpu_stub = S
return S
