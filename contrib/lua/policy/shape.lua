-- shape: the job's shape on one partition as slurmctld will allocate it: GPUs per node from
-- the request in any form, and the node count (--nodes, --nodelist, tasks, CPUs, --gpus,
-- --spread-job).

local import = ...
local format = string.format
local floor = math.floor
local parse_gpus = import("gpus", "parse_gpus")
local host_count = import("hostlist", "host_count")
local ceil_div, flag_set, pos32, posnum = import("util", "ceil_div", "flag_set", "pos32", "posnum")


-- GPUs per node the job gets on this partition, or why that is unknown.
local function gpu_shape(job, part)
  local hw = part.gpus
  local g = {hw = hw}
  local gpn = posnum(job.gpus_per_node)
  if gpn and gpn > 0 then
    g.per_node = gpn; g.how = "the GPUs on the node"
    return g
  end
  local n, err = parse_gpus(job.tres_per_node)
  if err then g.bad = err; g.bad_text = job.tres_per_node; return g end
  if n == 0 then g.none = true; return g end
  if n then g.per_node = n; g.how = "the per-node GPU request"; return g end
  n, err = parse_gpus(job.tres_per_task)
  if err then g.bad = err; g.bad_text = job.tres_per_task; return g end
  if n then
    local tpn = posnum(job.ntasks_per_node)
    if tpn and tpn > 0 then
      g.per_node = n * tpn; g.how = "--gpus-per-task x --ntasks-per-node"
      return g
    end
    local nt = posnum(job.num_tasks)
    if nt then g.total = n * nt end
    g.unknown = "--gpus-per-task without --ntasks-per-node"
    return g
  end
  n, err = parse_gpus(job.tres_per_socket)
  if err then g.bad = err; g.bad_text = job.tres_per_socket; return g end
  if n then
    local spn = posnum(job.sockets_per_node)
    if spn and spn > 0 then
      g.per_node = n * spn; g.how = "--gpus-per-socket x --sockets-per-node"
      return g
    end
    g.unknown = "--gpus-per-socket without --sockets-per-node"
    return g
  end
  n, err = parse_gpus(job.tres_per_job)
  if err then g.bad = err; g.bad_text = job.tres_per_job; return g end
  if n then
    g.total = n
    g.how = "--gpus"
    return g
  end
  if job.exclusive or part.exclusive then
    g.per_node = hw; g.how = "whole nodes"
    return g
  end
  g.none = true
  return g
end

local SPREAD_JOB = 256 -- job_desc.bitflags bit of --spread-job (SLURM_BIT(8) in slurm.h)

-- The nodes Slurm must give the job on a partition, computed as slurmctld does: --nodes
-- min[-max], raised to the --nodelist host count, to ceil(tasks / --ntasks-per-node), to the
-- CPUs asked for (tasks x --cpus-per-task, --mincpus/NumCPUs) over the node's CPUs, to a
-- --gpus total over the node's GPUs, and spread over up to one node per task by --spread-job.
-- Returns {min, max, explicit (the node count is fixed by the request), how}.
-- The node count n raises nmin to (capped at nmax), or nil when it does not raise it.
local function raised(nmin, nmax, n)
  if n and nmax and n > nmax then n = nmax end
  if n and n >= 1 and (nmin == nil or n > nmin) then return n end
  return nil
end

local function job_nodes(job, part, g, hw)
  local nmin, nmax = posnum(job.nodes_min), posnum(job.nodes_max)
  if nmax == 0 then nmax = nil end -- a job record's "no maximum"
  local shape = {explicit = nmin ~= nil, how = nmin and "--nodes" or nil}
  -- tasks and CPUs raise the count up to the job's maximum (beyond it Slurm refuses the job,
  -- and a step's exact node count, as SPANK gives it, is never raised): see raised()
  local hosts = host_count(job.req_nodes)
  local r
  if hosts then
    if nmax and nmax < hosts then nmax = hosts end -- slurmctld runs the job on every listed host
    r = raised(nmin, nmax, hosts)
    if r then nmin, shape.how = r, "--nodelist" end
    shape.explicit = true
    shape.hosts = hosts
  end
  local nt, tpn = posnum(job.num_tasks), posnum(job.ntasks_per_node)
  if nt and tpn and tpn > 0 then
    r = raised(nmin, nmax, ceil_div(nt, tpn))
    if r then nmin, shape.how = r, "--ntasks / --ntasks-per-node" end
  elseif g.per_node and g.per_node > 0 and (nt or pos32(job.min_cpus)) then
    -- --ntasks-per-gpu: the tasks need tasks / per-GPU GPUs, g.per_node on each node. sbatch
    -- rewrites num_tasks to the tasks of one node's GPUs and keeps --ntasks in min_cpus (x
    -- --cpus-per-task; seen live on 22.05 and 24.11: --ntasks=16 --ntasks-per-gpu=1
    -- --gpus-per-node=8 arrives as num_tasks=8 min_cpus=16 and runs on two nodes)
    local tpg = posnum(job.ntasks_per_tres)
    if tpg and tpg > 0 then
      local gpn = g.per_node
      if hw and hw > 0 and gpn > hw then gpn = hw end
      local tasks = nt or 0
      local by_cpus = floor((pos32(job.min_cpus) or 0) / (posnum(job.cpus_per_task) or 1))
      if by_cpus > tasks then tasks = by_cpus end
      r = raised(nmin, nmax, ceil_div(ceil_div(tasks, tpg), gpn))
      if r then nmin, shape.how = r, "--ntasks / --ntasks-per-gpu" end
    end
  end
  local cpus = posnum(part.cpus)
  if cpus and cpus > 0 then
    local cpt = posnum(job.cpus_per_task) or 1
    local want = pos32(job.min_cpus) or 0
    if nt and nt * cpt > want then want = nt * cpt end
    if g.total then -- --cpus-per-gpu with a GPU total: that many CPUs for each GPU, wherever it lands
      local cpg = parse_gpus(job.cpus_per_tres)
      if cpg and g.total * cpg > want then want = g.total * cpg end
    end
    if want > cpus then
      r = raised(nmin, nmax, ceil_div(want, cpus))
      if r then nmin, shape.how = r, format("%d CPUs over %d per node", want, cpus) end
    end
  end
  if g.total and hw and hw > 0 and g.total > hw and nmin == nil then
    r = raised(nmin, nmax, ceil_div(g.total, hw))
    if r then nmin, shape.how = r, "--gpus" end
  end
  if nmin == nil or nmin < 1 then nmin = 1 end
  if nmax ~= nil and nmax < nmin then nmax = nmin end
  if flag_set(job.bitflags, SPREAD_JOB) then
    -- --spread-job: as many nodes as possible, up to one per task
    local most = posnum(part.nodes) or 2
    if nmax and nmax < most then most = nmax end
    if nt and nt < most then most = nt end
    if most > nmin then
      nmin = most
      shape.how = "--spread-job"
      if nmax == nil or nmax < nmin then nmax = nmin end
    end
  end
  shape.min, shape.max = nmin, nmax
  return shape
end

-- Whether the job asks for GPUs in any form (an unreadable GPU request counts).
local function asks_for_gpus(job)
  local g = posnum(job.gpus_per_node)
  if g and g > 0 then return true end
  local n, err = parse_gpus(job.tres_per_node)
  if err or (n and n > 0) then return true end
  n, err = parse_gpus(job.tres_per_job)
  if err or (n and n > 0) then return true end
  n, err = parse_gpus(job.tres_per_task)
  if err or (n and n > 0) then return true end
  n, err = parse_gpus(job.tres_per_socket)
  return err ~= nil or (n ~= nil and n > 0)
end

return {gpu_shape = gpu_shape, job_nodes = job_nodes, asks_for_gpus = asks_for_gpus}
