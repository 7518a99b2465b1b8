-- partitions: the partitions a job may run on (none: the default; "a,b": each), and the
-- note and log lines for GPU jobs on partitions the site does not describe.

local import = ...
local find, sub, format = string.find, string.sub, string.format
local concat = table.concat
local TAG, clean = import("util", "TAG", "clean")


-- The admin-facing note for a GPU job on a partition the site table does not describe: the
-- filter checks nothing there, which must never pass silently (slurmgpu admin install compares
-- the site with the cluster's partitions to prevent it).
local function unknown_note(pname, topo)
  local order = type(topo.partition_order) == "table" and topo.partition_order or {}
  local known = {}
  for i = 1, #order do
    if i > 16 then known[#known + 1] = "..."; break end
    known[#known + 1] = clean(order[i], 64)
  end
  local how = "GPU jobs with a parallel layout there are refused (the site names no default partition to judge "
    .. "them by)"
  if type(topo.default_partition) == "string" and type(topo.partitions) == "table"
      and type(topo.partitions[topo.default_partition]) == "table" then
    how = format("GPU jobs there are judged as on the default partition '%s' (its node type)",
      clean(topo.default_partition, 64))
  end
  return format("partition '%s' is not described by site '%s' (it describes: %s); %s; add it to the site config "
    .. "and install the filter again", clean(pname, 64), clean(topo.site or "?", 64),
    #known > 0 and concat(known, ", ") or "none", how)
end

-- Unknown partition names already logged by this Lua state (slurmctld keeps one state until
-- the script is reloaded): each is logged once, and at most MAX_UNKNOWN names are remembered.
local MAX_UNKNOWN = 64
local unknown_seen, unknown_count, unknown_full = {}, 0, false

-- true the first time `name` is seen; "full" once when the table is full; false otherwise.
local function first_unknown(name)
  local key = clean(name, 64)
  if unknown_seen[key] then return false end
  if unknown_count >= MAX_UNKNOWN then
    if unknown_full then return false end
    unknown_full = true
    return "full"
  end
  unknown_count = unknown_count + 1
  unknown_seen[key] = true
  return true
end

-- The log lines for a verdict's unknown partitions, each name once per Lua state.
local function unknown_log_lines(v)
  local out = {}
  local u = type(v) == "table" and v.unknown_partitions or nil
  if type(u) ~= "table" then return out end
  for i = 1, #u do
    local first = first_unknown(u[i])
    if first == true then
      out[#out + 1] = TAG .. " warning unknown-partition=" .. clean(u[i], 64) .. ": " .. tostring(v.notes[i])
        .. " (logged once per partition name until the filter reloads)"
    elseif first == "full" then
      out[#out + 1] = TAG .. " warning unknown-partition: more than " .. MAX_UNKNOWN
        .. " unknown partition names; no more are logged until the filter reloads"
    end
  end
  return out
end

local function partitions_of(job, topo)
  local names = {}
  local p = job.partition
  if type(p) ~= "string" or p == "" then
    local d = job.default_partition
    if type(d) ~= "string" or d == "" then d = topo.default_partition end
    if type(d) == "string" then names[1] = d end
    return names
  end
  local pos = 1
  for _ = 1, 64 do
    local comma = find(p, ",", pos, true)
    local name = sub(p, pos, (comma or (#p + 1)) - 1)
    if name ~= "" then names[#names + 1] = name end
    if not comma then break end
    pos = comma + 1
  end
  return names
end

return {partitions_of = partitions_of, unknown_note = unknown_note, first_unknown = first_unknown,
  unknown_log_lines = unknown_log_lines}
