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

-- Distinct names one expression stands for, without expanding it: per bracket, the numbers of
-- its ranges (united per digit width: n[1-4,3-6] is 6 names, n[1,01] 2), multiplied. nil if
-- unreadable.
local function expr_count(expr)
  local total, p = 1, 1
  for _ = 1, 8 do
    local b = find(expr, "[", p, true)
    if b == nil then return total end
    local e = find(expr, "]", b + 1, true)
    if e == nil then return nil end
    local by_width, pos, inner = {}, 1, sub(expr, b + 1, e - 1)
    for _ = 1, 256 do
      local comma = find(inner, ",", pos, true)
      local item = sub(inner, pos, (comma or (#inner + 1)) - 1)
      local a, z = match(item, "^(%d+)%-(%d+)$")
      if a == nil then a = match(item, "^(%d+)$"); z = a end
      if a == nil or #a > 9 or #z > 9 or tonumber(z) < tonumber(a) then return nil end
      local w = by_width[#a] or {}
      by_width[#a] = w
      w[#w + 1] = {tonumber(a), tonumber(z)}
      if not comma then break end
      pos = comma + 1
    end
    local n = 0
    for _, ranges in pairs(by_width) do
      table.sort(ranges, function(x, y) return x[1] < y[1] end)
      local lo, hi = ranges[1][1], ranges[1][2]
      for i = 2, #ranges do
        if ranges[i][1] > hi + 1 then n = n + hi - lo + 1; lo, hi = ranges[i][1], ranges[i][2]
        elseif ranges[i][2] > hi then hi = ranges[i][2] end
      end
      n = n + hi - lo + 1
    end
    total = total * n
    if total > HOSTS_MAX then return HOSTS_MAX end
    p = e + 1
  end
  return nil
end

local EXPAND_MAX = 1024 -- names expanded to count distinct ones across expressions

local function host_count(s)
  if type(s) ~= "string" or s == "" then return nil end
  if #s > HOSTLIST_BYTES then return HOSTS_MAX end
  local exprs, pos, len = {}, 1, #s
  while pos <= len do -- top-level commas only (inside brackets they separate numbers)
    local e = pos
    for _ = 1, 4096 do
      local h = find(s, "[%[,]", e)
      if h == nil then e = len + 1; break end
      if byte(s, h) == 44 then e = h; break end
      local close = find(s, "]", h, true)
      if close == nil then return HOSTS_MAX end
      e = close + 1
    end
    local expr = sub(s, pos, e - 1)
    if expr ~= "" then exprs[#exprs + 1] = expr end
    if #exprs > 4096 then return HOSTS_MAX end
    pos = e + 1
  end
  if #exprs == 0 then return nil end
  -- plain names go into a set; bracket expressions (gpu[0001-4096], r[1-64]n[1-64]) are counted
  -- and, when few names together, expanded into the same set; else the count is the larger of the
  -- set and the largest expression (a lower bound: already more nodes than any TP group spans)
  local out, seen, bracketed, upper, largest = {n = 0}, {}, {}, 0, 0
  for i = 1, #exprs do
    local x = exprs[i]
    if find(x, "[", 1, true) then
      local n = expr_count(x)
      if n == nil then return HOSTS_MAX end
      bracketed[#bracketed + 1] = x
      upper = upper + n
      if n > largest then largest = n end
    elseif not seen[x] then
      seen[x] = true
      out.n = out.n + 1
    end
  end
  if #bracketed > 0 and #exprs == 1 then return largest end
  if upper > EXPAND_MAX then return out.n > largest and out.n or largest end
  for i = 1, #bracketed do
    if not expand_host(bracketed[i], out, seen, HOSTS_MAX) then return HOSTS_MAX end
  end
  return out.n
end

return {host_count = host_count, HOSTS_MAX = HOSTS_MAX}
