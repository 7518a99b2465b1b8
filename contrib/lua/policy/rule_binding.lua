-- Warning: a multi-node GPU job whose steps bind no rank to CPUs, on nodes with more than one
-- NUMA node (the site's affinity map: partition field `numa`, the NUMA nodes with CPUs).
--   unbound-ranks   every rank may run on the far socket from its GPU (docs/affinity.md)
-- The site chooses with policy.unbound_ranks: warn, off, or auto (the default: warn where the
-- map was read from the site's own nodes, `verified: true`); topology_table() writes `numa` only
-- for partitions where the rule applies. It reads only what is all visible (a
-- batch script, or a task environment the caller marks complete), only for multi-node GPU jobs
-- on such partitions, and pays for itself: five plain finds over at most the first LOOK_MAX
-- bytes of each document, outside the work budget, so it can never truncate the layout scan
-- or change a verdict. A mention outside whole-line comments counts as a binding (an echo or an
-- inline comment too): the rule may stay silent, it never warns a bound job.

local import = ...
local byte, find, format, sub = string.byte, string.find, string.format, string.sub
local add_finding = import("fix", "add_finding")
local env_get = import("util", "env_get")

local LOOK_MAX = 262144
local BACK_MAX = 256 -- bytes looked back for the start of a hit's line

-- Whether the hit at h sits on a whole-line comment (`#` first on its line); a line that starts
-- more than BACK_MAX bytes back counts as code.
local function on_comment_line(t, h)
  local q = h - 1
  local stop = h > BACK_MAX and h - BACK_MAX or 1
  while q >= stop do
    local c = byte(t, q)
    if c == 10 then break end
    q = q - 1
  end
  if q < stop and stop > 1 then return false end
  local first = find(t, "[^ \t]", q + 1)
  return first ~= nil and first < h and byte(t, first) == 35
end

-- "bind" preceded by cpu-/gpu-/numa-/numa_ or followed by _cores (srun --cpu-bind/--gpu-bind,
-- vLLM --numa-bind, torchrun --numa-binding, DeepSpeed --bind_cores_to_rank; not apptainer
-- --bind); any "numa" word (numactl, SGLang --numa-node); accelerate --enable_cpu_affinity;
-- taskset; SLURM_CPU_BIND. At most 64 hits of each, outside whole-line comments.
local NEEDLES = {"bind", "numa", "cpu_affinity", "taskset", "CPU_BIND"}
local BIND_BEFORE = {["cpu-"] = true, ["gpu-"] = true, ["uma-"] = true, ["uma_"] = true}

local function binds_in(t, n)
  if n > LOOK_MAX then n = LOOK_MAX end
  for i = 1, #NEEDLES do
    local w, p = NEEDLES[i], 1
    for _ = 1, 64 do
      local h = find(t, w, p, true)
      if h == nil or h > n then break end
      local counts = i > 1 or BIND_BEFORE[sub(t, h - 4, h - 1)] or sub(t, h + 4, h + 9) == "_cores"
      if counts and not on_comment_line(t, h) then return true end
      p = h + #w
    end
  end
  return false
end

local function unbound_ranks(ctx, f, out)
  local job, det, part = ctx.job, ctx.det, f.part
  local numa = part.numa
  if not f.multi or f.g.none or type(numa) ~= "number" or numa < 2 or ctx.topo.unbound_ranks == "off" then return end
  if not (det.script_doc or job.env_complete) or env_get(job.env, "SLURM_CPU_BIND") ~= nil then return end
  for i = 1, #det.docs do
    local d = det.docs[i]
    if binds_in(d.t, d.n) then return end
  end
  add_finding(out, "warn", "unbound-ranks", format(
    "multi-node job on partition '%s' binds no rank to CPUs, and its nodes have %d NUMA nodes: a rank may run "
      .. "on the far socket from its GPU (slower copies and collectives). Bind each rank to its GPU's CPUs "
      .. "(srun --cpu-bind=mask_cpu, torchrun --numa-binding=node, ...: `slurmgpu gen` writes them from the site "
      .. "map; `slurmgpu docs affinity`).",
    f.pname, numa))
end

return {unbound_ranks = unbound_ranks}
