-- slurmgpu SPANK adapter: the facts slurmstepd has about one task -> the policy's plain job
-- table -> an action for contrib/spank/slurmgpu_spank.c. Not loadable alone:
-- `slurmgpu admin render-filter --kind spank` puts the site table (TOPO) and the policy
-- module (P) above it. Lua 5.1 only.
--
-- The plugin calls slurmgpu_spank_check(step, opts) in every task of every step just before exec,
-- as the job's user; in the batch step only where policy.script_check is batch-step (elsewhere
-- job_submit judged the script at submission), with step.batch, step.script (and
-- step.script_truncated, step.script_max) besides. `step` holds:
--   argv{...}          the task's command line (1-based; argv_truncated past 4 MB)
--   env{NAME=value}    the task's environment (SLURM_*, CUDA_VISIBLE_DEVICES, the user's vars)
--   nnodes, node_id    nodes in the step, this node's index
--   local_tasks        tasks of the step on this node
--   total_tasks, task_id, global_task_id, job_id, step_id, uid, user (slurmstepd's items:
--   S_JOB_UID and its passwd name)
-- User, account and QOS never come from the task environment (SLURM_JOB_USER/_ACCOUNT/_QOS):
-- the srun client sets those and a user can override them. slurmstepd has no account or QOS
-- item, so at a step's launch only user/uid exemptions apply (the batch step differs: see
-- job_from_batch).
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


-- The job's user and uid as slurmstepd knows them (S_JOB_UID and its passwd name; the uid as
-- text when the name is unknown), never the task environment's.
local function with_user(job, step)
  job.uid = type(step.uid) == "number" and step.uid >= 0 and step.uid < 4294967294 and step.uid or nil
  job.user = str(step.user) or (job.uid ~= nil and tostring(job.uid)) or nil
  return job
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
  }
  return with_user(job, step)
end

-- The batch step (policy.script_check batch-step; step.batch): the job's batch script, read by
-- the plugin from the batch task's argv[0] (slurmd's copy, at most 4 MB: step.script_truncated
-- past that), judged as job_submit judges it at submission on other sites. The shape comes from
-- the job's real allocation and what sbatch exports: slurmstepd sets SLURM_JOB_NUM_NODES and
-- SLURM_JOB_PARTITION from the job record, sbatch the SLURM_* of the options it was given
-- (SLURM_GPUS_PER_NODE, SLURM_NTASKS_PER_NODE, ...), which are what slurmctld allocated by. A user
-- who edits those in the environment can only describe a request Slurm did not allocate, never
-- move a node: the node count is the allocation's. User and uid come from slurmstepd; the account
-- and QOS from SLURM_JOB_ACCOUNT / SLURM_JOB_QOS, which slurmd sets for the batch step from the job
-- record over any value of the same name in the submitted environment (seen live on 22.05 with
-- slurmdbd; tests/test_policy_accounting.py), unlike a step's, which its srun client sets. The
-- policy honours them, as at submission, only where accounting validates them
-- (policy.accounting_enforce), where every job has them.
local function gres(v)
  if type(v) ~= "string" or v == "" or #v > 256 then return nil end
  return "gres/gpu:" .. v
end

local function job_from_batch(step)
  local env = type(step.env) == "table" and step.env or {}
  local argv = {}
  local sargv = type(step.argv) == "table" and step.argv or {}
  for i = 2, #sargv do argv[#argv + 1] = sargv[i] end -- argv[1] is the script's path
  local nodes = digits(env.SLURM_JOB_NUM_NODES) or digits(env.SLURM_NNODES)
  local per_job, per_task = gres(env.SLURM_GPUS), gres(env.SLURM_GPUS_PER_TASK)
  -- a per-node request: the GPUs the batch step holds on the first node, which are all the job's
  -- there, and every node gets the same (--gres=gpu:N exports nothing, and with --gpus-per-node=8
  -- --gres=gpu:4 the last one wins while SLURM_GPUS_PER_NODE says 8); SLURM_GPUS_PER_NODE only when
  -- slurmstepd set no count
  local per_node = nil
  if per_job == nil and per_task == nil then
    local n = gpus_on_node(env)
    per_node = n and ("gres/gpu:" .. n) or gres(env.SLURM_GPUS_PER_NODE)
  end
  local job = {
    origin = "batch-step",
    script = type(step.script) == "string" and step.script or nil,
    argv = argv,
    env = env,
    env_complete = true,
    partition = str(env.SLURM_JOB_PARTITION),
    nodes_min = nodes,
    nodes_max = nodes,
    num_tasks = digits(env.SLURM_NTASKS),
    ntasks_per_node = digits(env.SLURM_NTASKS_PER_NODE),
    cpus_per_task = digits(env.SLURM_CPUS_PER_TASK),
    tres_per_node = per_node,
    tres_per_job = per_job,
    tres_per_task = per_task,
    ntasks_per_tres = digits(env.SLURM_NTASKS_PER_GPU),
    cpus_per_tres = gres(env.SLURM_CPUS_PER_GPU),
    account = str(env.SLURM_JOB_ACCOUNT),
    qos = str(env.SLURM_JOB_QOS),
  }
  return with_user(job, step)
end

-- Whether the plugin should read the batch script and call slurmgpu_spank_check for the batch
-- step (a global it reads after loading this file): only where job_submit left it (batch-step).
slurmgpu_spank_batch = TOPO.script_check == "batch-step"

local NOT_ENFORCED = " (not enforced: the launch-time guard is in warn mode)"
local TRUNCATED = "slurmgpu: this %d-node batch script is longer than the %d bytes the launch-time guard reads, "
  .. "so where its tensor-parallel groups run cannot be checked. Fix: keep data out of the script (a file it reads)."

-- A multi-node batch script longer than the plugin reads: refused (rule scan-truncated), as job_submit
-- refuses a multi-node job whose scan its work budget stops.
local function truncated_verdict(step, job)
  local nodes = job.nodes_min
  if not (step.script_truncated and nodes and nodes > 1) then return nil end
  return {decision = "reject", code = P.REJECT_CODE, rules = {"scan-truncated"}, warnings = {}, source = "none",
          layout = {}, messages = {string.format(TRUNCATED, nodes, tonumber(step.script_max) or 0)}}
end

function slurmgpu_spank_check(step, opts)
  local batch = step.batch == true
  if batch and not slurmgpu_spank_batch then return "allow", "", "" end -- job_submit judged it
  local job = batch and job_from_batch(step) or job_from_step(step)
  local v = batch and truncated_verdict(step, job) or P.evaluate(job, TOPO) -- a bug raises: on_error= decides
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
slurmgpu_spank = {job_from_step = job_from_step, job_from_batch = job_from_batch, policy = P, topo = TOPO}
