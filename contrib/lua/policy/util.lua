-- util: small helpers every policy module shares (printable text, Slurm's proxies and
-- "unset" numbers, integer arithmetic that stays an integer in Lua 5.3+).

local sub, match, gsub = string.sub, string.match, string.gsub
local floor = math.floor


local TAG = "slurmgpu-filter:" -- every log line of the filter carries it
local UNSET = 65534        -- numbers at or above this are Slurm's NO_VAL/INFINITE markers

-- small helpers

-- Printable ASCII only, bounded: safe in log_user/log_info and identical in every runtime.
local function clean(s, n)
  s = tostring(s)
  if #s > n then s = sub(s, 1, n) .. "..." end
  return (gsub(s, "[^%w%p ]", "?"))
end

-- Small readers the Slurm adapters share (job_desc and cli_filter options are proxies
-- whose fields may raise; Slurm marks "unset" numbers with NO_VAL16 and above).
local function index(obj, key) return obj[key] end

local function get(obj, key)
  if obj == nil then return nil end
  local ok, v = pcall(index, obj, key)
  if ok then return v end
  return nil
end

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

local function num(v)
  if type(v) == "number" and v >= 0 and v < 65534 then return v end
  return nil
end

local function int(digits)
  if digits == nil or #digits > 7 then return nil end
  return tonumber(digits)
end

-- Line number of position p, for the one line a message names (nil past 64 kB: not worth it).
local function line_number(s, p)
  if p > 65536 then return nil end
  local _, n = gsub(sub(s, 1, p), "\n", "")
  return n + 1
end

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

local function ceil_div(a, b) return floor((a + b - 1) / b) end

local function nonempty(list) return type(list) == "table" and list[1] ~= nil end

local function in_list(list, value)
  if type(list) ~= "table" or value == nil then return false end
  for i = 1, #list do
    if list[i] == value then return true end
  end
  return false
end

local function env_get(env, name)
  if type(env) ~= "table" then return nil end
  local v = env[name]
  if type(v) == "string" then return v end
  return nil
end

local function env_int(env, name)
  local v = env_get(env, name)
  if v and #v <= 7 and match(v, "^%d+$") then return tonumber(v) end
  return nil
end

local function posnum(v)
  if type(v) == "number" and v >= 0 and v < UNSET then return floor(v) end
  return nil
end


local function plural(n, word)
  if n == 1 then return "1 " .. word end
  return tostring(n) .. " " .. word .. "s"
end

local function pos32(v)
  if type(v) == "number" and v >= 0 and v < 4294967294 then return floor(v) end
  return nil
end

-- Whether bit `bit` (a power of two) is set in job_desc.bitflags. The field is 64 bits wide and
-- users set bits 24 (--external) and 38-45 (--gres-flags, --stepmgr, 25.11's segment and requeue
-- flags): any number exact as a double (below 2^53) is read, never through a 32-bit guard.
local function flag_set(v, bit)
  if type(v) ~= "number" or v < 0 or v >= 9007199254740992 then return false end
  return floor(floor(v) / bit) % 2 == 1
end

return {
  clean = clean, index = index, get = get, str = str, num = num, int = int, line_number = line_number,
  gcd = gcd, ceil_div = ceil_div, nonempty = nonempty, in_list = in_list, env_get = env_get, env_int = env_int,
  posnum = posnum, pos32 = pos32, flag_set = flag_set, plural = plural, UNSET = UNSET, TAG = TAG,
}
