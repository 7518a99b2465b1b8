-- slurmgpu SPANK adapter: the facts slurmstepd has about one task -> the policy's plain job
-- table -> an action for contrib/spank/slurmgpu_spank.c. Not loadable alone:
-- `slurmgpu admin render-filter --kind spank` puts the site table (TOPO) and the policy
-- module (P) above it. Lua 5.1 only.
--
-- The plugin calls slurmgpu_spank_check(step, opts) in every task of every step (not the
-- batch script: job_submit checked it) just before exec, as the job's user. `step` holds:
--   argv{...}          the task's command line (1-based; argv_truncated past 4 MB)
--   env{NAME=value}    the task's environment (SLURM_*, CUDA_VISIBLE_DEVICES, the user's vars)
--   nnodes, node_id    nodes in the step, this node's index
--   local_tasks        tasks of the step on this node
--   total_tasks, task_id, global_task_id, job_id, step_id, uid, user (slurmstepd's items:
--   S_JOB_UID and its passwd name)
-- User, account and QOS never come from the task environment (SLURM_JOB_USER/_ACCOUNT/_QOS):
-- the srun client sets those and a user can override them. slurmstepd has no account or QOS
-- item, so at launch only user/uid exemptions apply.
-- `opts.mode` is the plugin's mode= ("enforce" or "warn"; "off" never calls this).
-- It returns action, message, log_line: action "reject" fails the task (enforce) and
-- prints message, "warn" prints message and runs, "allow" runs silently. A Lua error is
-- left to the plugin, which applies its on_error= setting (default: allow and log).

local concat = table.concat

local str, num = P.str, P.num

local function digits(v)
  if type(v) == "string" and #v <= 7 and string.match(v, "^%d+$") then return tonumber(v) end
  return nil
end


-- Entries of a device list such as "0,1,2,3" (nil when unset, empty or a placeholder).
local function count_list(v)
  if type(v) ~= "string" or v == "" or v == "NoDevFiles" or #v > 4096 then return nil end
  local n, pos = 0, 1
  for _ = 1, 1024 do
    n = n + 1
    local comma = string.find(v, ",", pos, true)
    if not comma then return n end
    pos = comma + 1
  end
  return nil
end

-- GPUs the step has on this node: Slurm's count first, then the device lists it sets.
local function gpus_on_node(env)
  return digits(env.SLURM_GPUS_ON_NODE) or count_list(env.SLURM_STEP_GPUS)
    or count_list(env.CUDA_VISIBLE_DEVICES) or count_list(env.ROCR_VISIBLE_DEVICES)
end


-- The plain job table (the contract in policy.lua) for one task of a step.
local function job_from_step(step)
  local env = type(step.env) == "table" and step.env or {}
  -- the policy reads argv as data, not shell text ('#' and newlines inside arguments are inert)
  local argv = type(step.argv) == "table" and step.argv or {}
  -- the step's nodes: a het step's S_JOB_NNODES is its own component's (seen live: 1 for a step
  -- over two 1-node components); srun puts the whole step's count in SLURM_STEP_NUM_NODES (a
  -- user can only raise it, which checks more, never less)
  local nodes = num(step.nnodes)
  local step_nodes = digits(env.SLURM_STEP_NUM_NODES)
  if step_nodes and (nodes == nil or step_nodes > nodes) then nodes = step_nodes end
  local job = {
    origin = "spank",
    argv = argv,
    env = env,
    env_complete = true, -- the task's whole environment: a missing NCCL setting is really missing
    partition = str(env.SLURM_JOB_PARTITION),
    nodes_min = nodes,
    nodes_max = nodes,
    num_tasks = num(step.total_tasks),
    ntasks_per_node = num(step.local_tasks),
    gpus_per_node = gpus_on_node(env),
    user = str(step.user),
    uid = type(step.uid) == "number" and step.uid >= 0 and step.uid < 4294967294 and step.uid or nil,
  }
  if job.user == nil and job.uid ~= nil then job.user = tostring(job.uid) end
  return job
end

local NOT_ENFORCED = " (not enforced: the launch-time guard is in warn mode)"

function slurmgpu_spank_check(step, opts)
  local job = job_from_step(step)
  local v = P.evaluate(job, TOPO) -- a bug raises: the plugin's on_error= decides
  local line = P.log_line(v, job)
  local warn_only = type(opts) == "table" and opts.mode == "warn"
  if v.decision == "reject" then
    -- the rejection alone (printed as errors); advisory warnings would read as errors too
    if not warn_only then return "reject", concat(v.messages, "\n"), line end
    local out = {}
    for i = 1, #v.messages do out[#out + 1] = v.messages[i] .. NOT_ENFORCED end
    for i = 1, #v.warnings do out[#out + 1] = v.warnings[i] end
    return "warn", concat(out, "\n"), line
  end
  -- advisory warnings only for steps that declare a parallel layout: `srun hostname` stays quiet
  if #v.warnings > 0 and v.source ~= "none" then return "warn", concat(v.warnings, "\n"), line end
  return "allow", "", line
end

-- For tests and `slurmgpu check`-style harnesses (the plugin ignores it).
slurmgpu_spank = {job_from_step = job_from_step, policy = P, topo = TOPO}
