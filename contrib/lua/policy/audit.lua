-- audit: what the filter leaves behind for admins: one grep-able log line per verdict
-- (slurmctld.log, read by `slurmgpu admin stats`), and the one-word verdict and the token
-- appended to the job's AdminComment (`sacct -o AdminComment`).

local import = ...
local gsub, format = string.gsub, string.format
local concat = table.concat
local user_of = import("exempt", "user_of")
local TAG, clean = import("util", "TAG", "clean")

-- The one-word verdict of the audit trail (AdminComment, log lines, `slurmgpu admin stats`):
-- ok | warn | reject | shadow-warn | shadow-reject | exempt | error.
local function verdict_word(v)
  if type(v) ~= "table" then return "error" end
  if v.internal_error then return "error" end
  if v.exempt then return "exempt" end
  if v.decision == "reject" then return "reject" end
  local sm, sw = v.shadow_messages or {}, v.shadow_warnings or {}
  if #sm > 0 then return "shadow-reject" end
  if #(v.warnings or {}) > 0 then return "warn" end
  if #sw > 0 then return "shadow-warn" end
  return "ok"
end

-- "slurmgpu=<verdict>[:<rule>,...]" for the job's AdminComment: at most AUDIT_MAX bytes, rule
-- ids cut at a comma ("+" marks the cut).
local AUDIT_MAX = 96
local function audit_token(v)
  local word = verdict_word(v)
  local token = "slurmgpu=" .. word
  local rules = type(v) == "table" and v.rules or {}
  if word == "ok" or word == "exempt" or word == "error" or #rules == 0 then return token end
  token = token .. ":"
  for i = 1, #rules do
    local r = gsub(clean(rules[i], 40), "[^%w%-_]", "")
    local piece = (i > 1 and "," or "") .. r
    if #token + #piece > AUDIT_MAX - 1 then return token .. "+" end
    token = token .. piece
  end
  return token
end

-- One grep-able log line for slurmctld.log.
local function log_line(v, job)
  local L = v.layout or {}
  local parts = {TAG, "decision=" .. tostring(v.decision), "code=" .. tostring(v.code)}
  if type(job) == "table" then
    parts[#parts + 1] = "origin=" .. clean(job.origin or "?", 16)
    local name = job.user
    if name == nil and verdict_word(v) ~= "ok" then name = user_of(job) end
    if name ~= nil or job.uid == nil then parts[#parts + 1] = "user=" .. clean(name or "?", 32) end
    if job.uid ~= nil then parts[#parts + 1] = "uid=" .. tostring(job.uid) end
    if job.account then parts[#parts + 1] = "account=" .. clean(job.account, 32) end
    local partition = job.partition or ("(default " .. tostring(job.default_partition or "?") .. ")")
    parts[#parts + 1] = "partition=" .. clean(partition, 64)
    if job.het_offset then parts[#parts + 1] = "het_offset=" .. tostring(job.het_offset) end
  end
  parts[#parts + 1] = format("tp=%s pp=%s cp=%s ep=%s", tostring(L.tp), tostring(L.pp), tostring(L.cp), tostring(L.ep))
  parts[#parts + 1] = "source=" .. tostring(v.source)
  parts[#parts + 1] = "launcher=" .. (v.launcher ~= "" and tostring(v.launcher) or "-")
  parts[#parts + 1] = "mode=" .. tostring(v.mode)
  parts[#parts + 1] = "rules=" .. (#v.rules > 0 and concat(v.rules, ",") or "-")
  if v.exempt then parts[#parts + 1] = "exempt=" .. gsub(tostring(v.exempt_reason), " ", ":") end
  if v.limit then parts[#parts + 1] = "limit=" .. gsub(gsub(tostring(v.limit), "[^%w%(%)]+", "-"), "[%(%)]", "") end
  if v.internal_error then parts[#parts + 1] = "internal-error=" .. v.internal_error end
  parts[#parts + 1] = "verdict=" .. verdict_word(v)
  return concat(parts, " ")
end

return {log_line = log_line, verdict_word = verdict_word, audit_token = audit_token, AUDIT_MAX = AUDIT_MAX}
