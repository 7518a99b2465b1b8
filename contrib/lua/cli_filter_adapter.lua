-- slurmgpu cli_filter adapter: sbatch/salloc/srun options -> the policy's plain job table.
-- Not loadable alone: `slurmgpu admin render-filter --kind cli_filter` puts the site table
-- (TOPO) and the policy module (P) above it. Lua 5.1 only.
--
-- cli_filter runs in the client, as the user, before the job reaches slurmctld: earlier and
-- friendlier than job_submit, but a user can bypass it (SLURM_CONF pointing elsewhere), so
-- job_submit.lua stays the enforcement. It also runs for srun steps inside an allocation,
-- which job_submit never sees. It checks the request shape, the command line (--wrap, srun's
-- command) and the user's environment. It reads no files, but one: on a site with
-- policy.script_check batch-step, job_submit no longer reads a multi-node job's batch script (the
-- SPANK plugin judges it when the job starts), so sbatch's script file is read here, as the user,
-- for the user to hear the verdict at submission. Elsewhere job_submit checks the script.

local SUCCESS = 0
local TAG = P.TAG

local get = P.get -- a field of a Slurm proxy, or nil if reading it raises

-- cli_filter option values are strings; unset reads as nil, "", "-2" or "unset", and options
-- that do not apply to the command (e.g. --wrap for salloc) read "invalid-context".
local function opt(options, key)
  local v = get(options, key)
  if type(v) == "number" then v = tostring(v) end
  if type(v) ~= "string" or v == "" or v == "-2" or v == "unset" or v == "invalid-context" then
    return nil
  end
  return v
end

local function optnum(options, key)
  local v = opt(options, key)
  if v and #v <= 7 and string.match(v, "^%d+$") then
    local n = tonumber(v)
    if n > 0 then return n end
  end
  return nil
end

local function getenv(name)
  local ok, v = pcall(os.getenv, name)
  if ok and type(v) == "string" and v ~= "" then return v end
  return nil
end

local function envnum(name)
  local v = getenv(name)
  if v and #v <= 7 and string.match(v, "^%d+$") then return tonumber(v) end
  return nil
end

-- "--gpus-per-node=h100:8" arrives without the gres prefix; "--gres" keeps it.
local function gpu_tres(v)
  if v == nil then return nil end
  local out, pos = {}, 1
  for _ = 1, 64 do
    local comma = string.find(v, ",", pos, true)
    local item = string.sub(v, pos, (comma or (#v + 1)) - 1)
    if item ~= "" then
      if string.sub(item, 1, 5) == "gres:" or string.sub(item, 1, 5) == "gres/" or string.sub(item, 1, 4) == "gpu:"
         or item == "gpu" then
        out[#out + 1] = item
      else
        out[#out + 1] = "gpu:" .. item
      end
    end
    if not comma then break end
    pos = comma + 1
  end
  if #out == 0 then return nil end
  return table.concat(out, ",")
end

local function join(a, b)
  if a and b then return a .. "," .. b end
  return a or b
end

-- The user's environment as sbatch would export it (--export=ALL by default).
-- --export=NONE passes every name starting with SLURM (SLURMGPU_TP too); NIL and a list of
-- names pass only SLURM_* names besides the listed ones (seen live on 22.05), and every SLURM*
-- name from 24.05 on (seen on 24.11; TOPO.export_keeps_slurm_prefix, from the site's version).
local function env_for(options)
  local export = opt(options, "export")
  local only = nil
  local keep = "SLURM_"
  if export == "NONE" or TOPO.export_keeps_slurm_prefix then keep = "SLURM" end
  if export and string.sub(export, 1, 3) ~= "ALL" then
    only = {}
    if export ~= "NONE" and export ~= "NIL" then
      local pos = 1
      for _ = 1, 256 do
        local comma = string.find(export, ",", pos, true)
        local item = string.sub(export, pos, (comma or (#export + 1)) - 1)
        local k, val = string.match(item, "^([%a_][%w_]*)=(.*)$")
        if k then only[k] = val elseif string.match(item, "^[%a_][%w_]*$") then only[item] = getenv(item) or false end
        if not comma then break end
        pos = comma + 1
      end
    end
  end
  return setmetatable({}, {__index = function(_, name)
    if type(name) ~= "string" then return nil end
    if only then
      local v = only[name]
      if type(v) == "string" then return v end
      if string.sub(name, 1, #keep) ~= keep then return nil end
    end
    return getenv(name)
  end})
end

-- sbatch's script file (policy.script_check batch-step), at most SCRIPT_MAX bytes: nil for a
-- script from standard input, an unreadable file or a longer one (the batch step judges those).
local SCRIPT_MAX = 4 * 1024 * 1024
local function script_file(path)
  if type(path) ~= "string" or path == "" or path == "-" then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local ok, s = pcall(f.read, f, SCRIPT_MAX + 1)
  f:close()
  if ok and type(s) == "string" and #s <= SCRIPT_MAX then return s end
  return nil
end

local function job_from_options(options, offset)
  local typ = opt(options, "type") or "sbatch"
  local in_step = typ == "srun" and getenv("SLURM_JOB_ID") ~= nil
  local job = {origin = "cli_filter", env = env_for(options), argv = {}}
  local argv = get(options, "argv")
  if type(argv) == "table" or type(argv) == "userdata" then
    for i = 1, 256 do
      local a = get(argv, i)
      if type(a) ~= "string" then break end
      job.argv[#job.argv + 1] = a
    end
  end
  local wrap = opt(options, "wrap")
  if wrap then
    job.script = "#!/bin/sh\n" .. wrap .. "\n"
  elseif typ == "sbatch" and TOPO.script_check == "batch-step" and job.argv[1] then
    job.script = script_file(job.argv[1]) -- argv[1] is the script, the rest its arguments
    if job.script then table.remove(job.argv, 1) end
  end
  job.partition = opt(options, "partition")
  local nodes = opt(options, "nodes")
  if nodes then
    local a, b = string.match(nodes, "^(%d+)%-(%d+)$")
    if a and tonumber(b) ~= 0 then -- "1-0" is Slurm's "not given" (max 0)
      job.nodes_min = tonumber(a)
      if tonumber(b) >= tonumber(a) then job.nodes_max = tonumber(b) end
    elseif not a and string.match(nodes, "^%d+$") then
      job.nodes_min = tonumber(nodes); job.nodes_max = tonumber(nodes)
    end
  end
  job.num_tasks = optnum(options, "ntasks")
  job.ntasks_per_node = optnum(options, "ntasks-per-node")
  job.tres_per_node = join(gpu_tres(opt(options, "gpus-per-node")), opt(options, "gres"))
  job.tres_per_job = gpu_tres(opt(options, "gpus"))
  job.tres_per_task = gpu_tres(opt(options, "gpus-per-task"))
  job.tres_per_socket = gpu_tres(opt(options, "gpus-per-socket"))
  job.sockets_per_node = optnum(options, "sockets-per-node")
  job.req_nodes = opt(options, "nodelist")
  job.cpus_per_task = optnum(options, "cpus-per-task")
  if job.cpus_per_task and job.num_tasks then job.min_cpus = job.num_tasks * job.cpus_per_task end
  local ex = opt(options, "exclusive")
  job.exclusive = ex == "exclusive" or ex == "topo"
  job.segment = optnum(options, "segment")
  job.account = opt(options, "account")
  job.qos = opt(options, "qos")
  job.user = getenv("USER") or getenv("LOGNAME")
  if type(offset) == "number" and offset > 0 then job.het_offset = offset end
  if in_step then
    -- a step inside an allocation: the shape comes from the allocation unless overridden
    job.origin = "cli_filter-step"
    job.partition = job.partition or getenv("SLURM_JOB_PARTITION")
    if job.nodes_min == nil then
      job.nodes_min = envnum("SLURM_JOB_NUM_NODES") or envnum("SLURM_NNODES")
      job.nodes_max = job.nodes_min -- a step cannot leave its allocation
    end
    if job.ntasks_per_node == nil then job.ntasks_per_node = envnum("SLURM_NTASKS_PER_NODE") end
    if job.tres_per_node == nil and job.tres_per_job == nil and job.tres_per_task == nil then
      job.gpus_per_node = envnum("SLURM_GPUS_ON_NODE") or envnum("SLURM_GPUS_PER_NODE")
    end
  end
  return job
end

local function log_verbose(line)
  pcall(slurm.log_verbose, "%s", line)
end

local function submit(options, offset)
  local job = job_from_options(options, offset)
  local v = P.decide(job, TOPO)
  log_verbose(P.log_line(v, job))
  for i = 1, #v.messages do pcall(slurm.log_error, "%s", v.messages[i]) end
  for i = 1, #v.warnings do pcall(slurm.log_info, "%s", v.warnings[i]) end
  if v.decision == "reject" then return -1 end
  return SUCCESS
end

function slurm_cli_setup_defaults(options, early_pass) -- luacheck: no unused args
  return SUCCESS
end

function slurm_cli_pre_submit(options, offset)
  local ok, code = pcall(submit, options, offset)
  if ok and type(code) == "number" then return code end
  pcall(slurm.log_verbose, "%s", TAG .. " internal-error stage=cli_filter " .. P.clean(code, 300))
  if TOPO.on_internal_error == "reject" then
    pcall(slurm.log_error, "%s",
      "slurmgpu: the GPU submit filter hit an internal error; please tell the cluster admins.")
    return -1
  end
  return SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id) -- luacheck: no unused args
  return SUCCESS
end

slurmgpu_filter = {job_from_options = job_from_options, policy = P, topo = TOPO}

return SUCCESS
