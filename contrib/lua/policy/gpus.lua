-- gpus: GPU requests in every spelling Slurm produces (gpu:8 <=20.11, gres:gpu:8 21.08-23.02,
-- gres/gpu:8 or gres/gpu=8 from 23.11, typed ...:h100:8, count suffixes k/m/g...).

local import = ...
local find, sub, byte, match =
  string.find, string.sub, string.byte, string.match
local clean, int = import("util", "clean", "int")


local SUFFIX = {k = 1024, K = 1024, m = 1048576, M = 1048576, g = 1073741824, G = 1073741824,
                t = 1099511627776, T = 1099511627776, p = 1125899906842624, P = 1125899906842624}

local function gpu_count(digits, suffix)
  local n = int(digits)
  if n == nil then return nil end
  if suffix ~= "" then n = n * SUFFIX[suffix] end
  return n
end

-- One TRES item -> type key ("" untyped) and count; false for other resources; nil, why for junk.
local function gpu_item(item)
  local rest = item
  local pre = sub(rest, 1, 5)
  if pre == "gres:" or pre == "gres/" then rest = sub(rest, 6) end
  if sub(rest, 1, 3) ~= "gpu" then return false end
  local c = byte(rest, 4)
  if c == nil then return "", 1 end
  if c ~= 58 and c ~= 61 then return false end -- "gpux": another resource
  rest = sub(rest, 5)
  local n, suf = match(rest, "^(%d+)([kKmMgGtTpP]?)$")
  if n then
    local cnt = gpu_count(n, suf)
    if cnt == nil then return nil, "count too large" end
    return "", cnt
  end
  local typ, n2, suf2 = match(rest, "^([%w_%.%-]+)[:=](%d+)([kKmMgGtTpP]?)$")
  if typ then
    local cnt = gpu_count(n2, suf2)
    if cnt == nil then return nil, "count too large" end
    return typ, cnt
  end
  if match(rest, "^[%w_%.%-]+$") then return rest, 1 end -- type only: one GPU
  return nil, "cannot read '" .. clean(item, 40) .. "'"
end

-- A TRES list -> total GPUs (last wins per type, types add up), or nil (no GPUs named), or nil, why.
local function parse_gpus(s)
  if type(s) ~= "string" or s == "" then return nil end
  if #s > 4096 then return nil, "request longer than 4096 characters" end
  local by_type, order = {}, {}
  local pos, items = 1, 0
  while true do
    local comma = find(s, ",", pos, true)
    local item = sub(s, pos, (comma or (#s + 1)) - 1)
    items = items + 1
    if items > 64 then return nil, "more than 64 items" end
    local key, n = gpu_item(item)
    if key == nil then return nil, n end
    if key then
      if by_type[key] == nil then order[#order + 1] = key end
      by_type[key] = n
    end
    if not comma then break end
    pos = comma + 1
  end
  if #order == 0 then return nil end
  local total = 0
  for i = 1, #order do total = total + by_type[order[i]] end
  return total
end

return {parse_gpus = parse_gpus}
