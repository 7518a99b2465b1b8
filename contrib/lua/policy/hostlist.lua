-- hostlist: distinct host names in a Slurm hostlist ("n[01-04,7],gpu3", "r[1-2]n[1-4]"),
-- bounded.

local find, sub, byte, match =
  string.find, string.sub, string.byte, string.match


-- Distinct host names in a Slurm hostlist ("n[01-04,7],gpu3", "r[1-2]n[1-4]"): the node count
-- --nodelist forces. At most HOSTS_MAX are expanded; a longer or unreadable list counts as
-- HOSTS_MAX (slurmctld refuses a list it cannot read, after the filter).
local HOSTS_MAX = 4096
local HOSTLIST_BYTES = 16384

local function expand_host(expr, out, seen, budget)
  local b = find(expr, "[", 1, true)
  if b == nil then
    if not seen[expr] then seen[expr] = true; out.n = out.n + 1 end
    return out.n < budget
  end
  local e = find(expr, "]", b + 1, true)
  if e == nil then return false end
  local pre, inner, rest = sub(expr, 1, b - 1), sub(expr, b + 1, e - 1), sub(expr, e + 1)
  local pos = 1
  for _ = 1, 256 do
    local comma = find(inner, ",", pos, true)
    local item = sub(inner, pos, (comma or (#inner + 1)) - 1)
    local a, z = match(item, "^(%d+)%-(%d+)$")
    if a == nil then a = match(item, "^(%d+)$"); z = a end
    if a == nil or #a > 9 or #z > 9 then return false end
    local lo, hi = tonumber(a), tonumber(z)
    if hi < lo or hi - lo >= budget then return false end
    local width = #a
    for k = lo, hi do
      local digits = tostring(k)
      if #digits < width then digits = string.rep("0", width - #digits) .. digits end
      if not expand_host(pre .. digits .. rest, out, seen, budget) then return false end
    end
    if not comma then return true end
    pos = comma + 1
  end
  return false
end

local function host_count(s)
  if type(s) ~= "string" or s == "" then return nil end
  if #s > HOSTLIST_BYTES then return HOSTS_MAX end
  local out, seen = {n = 0}, {}
  local pos, len = 1, #s
  while pos <= len do
    local depth, e = 0, pos
    while e <= len do
      local c = byte(s, e)
      if c == 91 then depth = depth + 1
      elseif c == 93 then depth = depth - 1
      elseif c == 44 and depth == 0 then break end
      e = e + 1
    end
    local expr = sub(s, pos, e - 1)
    if expr ~= "" and not expand_host(expr, out, seen, HOSTS_MAX) then return HOSTS_MAX end
    pos = e + 1
  end
  if out.n == 0 then return nil end
  return out.n
end

return {host_count = host_count, HOSTS_MAX = HOSTS_MAX}
