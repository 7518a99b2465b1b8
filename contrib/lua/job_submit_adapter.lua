-- slurmgpu job_submit adapter: slurmctld's job_desc -> the policy's plain job table -> a number.
-- Not loadable alone: `slurmgpu admin render-filter --kind job_submit` puts the site table
-- (TOPO) and the policy module (P) above it. Lua 5.1 only.
--
-- Why it is written this way (Slurm 22.05 facts, see docs/admin-filter.md):
--  * a Lua error, a non-numeric return or a nil passed to slurm.log_user ACCEPTS the job, so
--    everything runs under pcall and the decision is made explicitly;
--  * only eight slurm.ESLURM_* names exist on 22.05: codes are literal numbers;
--  * job_desc.script is copied on every access: it is read once;
--  * pairs() over job_desc or its environment yields nothing: fields are read by name.

local SUCCESS = 0
local TAG = P.TAG

-- A field of a Slurm proxy (nil if reading it raises); non-empty strings; numbers below
-- NO_VAL16 (65534), since NO_VAL, NO_VAL16 and INFINITE mean "not given".
local get, str, num = P.get, P.str, P.num

local function log(line)
  pcall(slurm.log_info, "%s", line)
end

local function user(msg)
  pcall(slurm.log_user, "%s", msg)
end

-- Slurm's default partition (flag_default) from part_list, smallest name if several.
local function default_partition(part_list)
  if type(part_list) ~= "table" then return nil end
  local best = nil
  for name, part in pairs(part_list) do
    local fd = get(part, "flag_default")
    if (fd == 1 or fd == true) and type(name) == "string" and (best == nil or name < best) then
      best = name
    end
  end
  return best
end

-- The job environment, looked up lazily by name (batch jobs and het components only: for
-- salloc/srun slurmctld logs an error on every lookup).
-- One shared metatable: the job's environment proxy is kept in the table under a key no name can
-- be, and each value read is stored in the table itself (false: not set), so a name costs one
-- lookup in slurmctld and a job no closure.
local ENVP = {}
local ENV_MT = {__index = function(t, name)
  local v = get(rawget(t, ENVP), name)
  if type(v) ~= "string" then v = false end
  rawset(t, name, v)
  return v
end}

local function env_of(desc)
  local envp = get(desc, "environment")
  if envp == nil then return nil end
  return setmetatable({[ENVP] = envp}, ENV_MT)
end

local function argv_of(desc, get_)
  local argv = get_(desc, "argv")
  local out = {}
  if argv == nil then return out end
  local argc = num(get_(desc, "argc")) or 0
  if argc > 257 then argc = 257 end
  for i = 1, argc - 1 do -- argv[0] is the script path
    local a = get_(argv, i)
    if type(a) == "string" then out[#out + 1] = a end
  end
  return out
end

-- A uid: any number below NO_VAL (nobody is 65534, which num() would drop).
local function uid_of(v)
  if type(v) == "number" and v >= 0 and v < 4294967294 then return v end
  return nil
end
local num32 = uid_of -- 32-bit fields (min_cpus, max_cpus) whose unset value is NO_VAL

-- job_desc.bitflags is a uint64_t that slurmctld pushes as a Lua number (a double): exact below
-- 2^53, which holds every bit a user can set (up to 45: --gres-flags, --stepmgr, and on 25.11+
-- --spread-segments, --consolidate-segments, --requeue=expedite). It was read through the 32-bit
-- guard once, so any such bit hid --spread-job. Beyond 2^53 the low bits are not exact: nil, and
-- the adapter says so in the log (flags_unreadable).
local FLAGS_EXACT = 9007199254740992 -- 2^53
local function flags64(v)
  if type(v) == "number" and v >= 0 and v < FLAGS_EXACT and v == math.floor(v) then return v end
  return nil
end
local function flags_unreadable(v)
  return type(v) == "number" and v >= FLAGS_EXACT
end

local function exclusive_of(shared)
  -- --exclusive sends shared=0 (JOB_SHARED_NONE); =topo is 4 (whole segment)
  return shared == 0 or shared == 4
end

-- Fields most verdicts never look at (a GPU request in another form, the default partition of a
-- job that names one, ...): read from the job_desc on first use. Each read is a C call into
-- slurmctld; a job kept beyond its own call (a het component) is read completely (materialize).
-- The script, argv and environment are lazy too: a job that runs on one node on every partition
-- it may use is decided from its fields alone (P.decide_single_node), and never reads them (the
-- script is copied on every access; each environment name is a search of the whole environment).
local function script_of(desc)
  local script = get(desc, "script")
  if type(script) ~= "string" then return nil end
  return script
end
local LAZY = {
  script = script_of,
  argv = function(desc) return argv_of(desc, get) end,
  -- batch jobs and het components only: for salloc/srun slurmctld logs an error on every lookup
  env = function(desc, _, job)
    if job.script ~= nil or job.het_offset ~= nil then return env_of(desc) end
    return nil
  end,
  default_partition = function(_, part_list) return default_partition(part_list) end,
  tres_per_job = function(desc) return str(get(desc, "tres_per_job")) end,
  tres_per_task = function(desc) return str(get(desc, "tres_per_task")) end,
  tres_per_socket = function(desc) return str(get(desc, "tres_per_socket")) end,
  sockets_per_node = function(desc) return num(get(desc, "sockets_per_node")) end,
  exclusive = function(desc) return exclusive_of(get(desc, "shared")) end,
  qos = function(desc) return str(get(desc, "qos")) end,
  -- NVL72 sites only; 25.11.2+ show a job without --segment as 0, not NO_VAL16
  segment = function(desc) local s = num(get(desc, "segment_size")); if s ~= 0 then return s end end,
  ntasks_per_tres = function(desc) return num(get(desc, "ntasks_per_tres")) end, -- --ntasks-per-gpu
  cpus_per_tres = function(desc) return str(get(desc, "cpus_per_tres")) end, -- --cpus-per-gpu
}

-- One shared metatable: the job_desc and part_list sit in the job table under keys no field name
-- can be, and so does the mark that a field was read and found unset (no closure per job).
local DESC, PARTS, READ = {}, {}, {}
for k in pairs(LAZY) do READ[k] = {} end
local LAZY_MT = {__index = function(job, k)
  local f = LAZY[k]
  if f == nil or rawget(job, READ[k]) then return nil end
  local v = f(rawget(job, DESC), rawget(job, PARTS), job)
  if v == nil then rawset(job, READ[k], true) else rawset(job, k, v) end
  return v
end}

-- job.lookup_user for the policy: the same function for every job (no closure per job).
local function lookup_user(job)
  return str(get(rawget(job, DESC), "user_name"))
end

local function materialize(job)
  for k in pairs(LAZY) do local _ = job[k] end
  if job.lookup_user then job.user = job.lookup_user(job); job.lookup_user = nil end
  setmetatable(job, nil)
  job[DESC], job[PARTS] = nil, nil
  for _, mark in pairs(READ) do job[mark] = nil end
end

-- A heterogeneous job's components reach slurm_job_submit one after the other in one RPC
-- (offset 0, 1, ...), and only component 0 carries the batch script, although its srun
-- lines may run on any component (or on several: srun --het-group=0,1). Component 0's script
-- and every component's shape are kept here for the later components of the same submission
-- (same uid) and dropped by any other call.
local het_state = nil

local function het_share(job, script, het)
  if het == nil then
    het_state = nil
    return
  end
  materialize(job) -- kept for the later components: nothing may be read from this job_desc then
  if het == 0 then
    het_state = {uid = job.uid, script = script, comps = {}}
  elseif het_state == nil or het_state.uid ~= job.uid or het_state.comps[het - 1] == nil then
    het_state = nil
    return
  elseif script == nil then
    job.script = het_state.script
  end
  het_state.comps[het] = job
  job.het_components = het_state.comps
end
-- The plain job table from a job_desc (the contract in policy.lua), each field read through
-- get_. user_name is not read here: slurmctld resolves it through NSS on every read (an LDAP
-- query on many sites); the policy asks job.lookup_user(job) only where it needs the name.
local function read_job(desc, part_list, uid, get_)
  local job = {
    origin = "job_submit",
    partition = str(get_(desc, "partition")),
    nodes_min = num(get_(desc, "min_nodes")),
    nodes_max = num(get_(desc, "max_nodes")),
    num_tasks = num(get_(desc, "num_tasks")),
    ntasks_per_node = num(get_(desc, "ntasks_per_node")),
    tres_per_node = str(get_(desc, "tres_per_node")) or str(get_(desc, "gres")),
    cpus_per_task = num(get_(desc, "cpus_per_task")),
    min_cpus = num32(get_(desc, "min_cpus")),
    req_nodes = str(get_(desc, "req_nodes")),
    bitflags = flags64(get_(desc, "bitflags")),
    uid = uid_of(uid) or uid_of(get_(desc, "user_id")),
    account = str(get_(desc, "account")),
    het_offset = num(get_(desc, "het_job_offset")),
    lookup_user = lookup_user,
  }
  job[DESC], job[PARTS] = desc, part_list
  return setmetatable(job, LAZY_MT)
end

-- Plain reads first (one pcall for the whole job, not one per field); if any read raises, every
-- field again through get(), which turns a failing read into nil.
local function index(obj, key) return obj[key] end
local function job_from_desc(desc, part_list, uid)
  local ok, job = pcall(read_job, desc, part_list, uid, index)
  if not ok or type(job) ~= "table" then job = read_job(desc, part_list, uid, get) end
  if job.het_offset ~= nil then het_share(job, job.script, job.het_offset) else het_share(job, nil, nil) end
  return job
end

-- The policy's verdict for a job_desc (also called by `slurmgpu check` through a stub).
-- judged_at: where the site judges this job's script (policy.script_check): "batch-step" when
-- slurm_job_submit leaves it to the SPANK plugin (`slurmgpu check` tells the user sbatch will not
-- refuse it), else "submit".
local function evaluate_desc(desc, part_list, uid)
  local job = job_from_desc(desc, part_list, uid)
  local v = P.decide(job, TOPO)
  v.judged_at = P.deferrable(job, TOPO) and "batch-step" or "submit"
  return v, job
end

local INTERNAL_REJECT = "slurmgpu: the GPU submit filter hit an internal error and this cluster rejects jobs when "
  .. "that happens; please tell the cluster admins (log tag " .. TAG .. ")."

-- The site's choice and the code, read once at load: the path below runs after something failed
-- and must not depend on anything that can fail again.
local REJECT_ON_ERROR = TOPO.on_internal_error == "reject"
local ERROR_CODE = P.ERROR_CODE

local function fallback_logged(stage, err)
  log(string.format(TAG .. " decision=%s internal-error stage=%s %s", REJECT_ON_ERROR and "reject" or "accept",
    stage, P.clean(err, 300)))
end

-- Whatever went wrong inside the filter, slurmctld gets a number and the user at most the fixed
-- INTERNAL_REJECT line: Slurm 26.05 rejects a job whose job_submit raises and shows the raw Lua
-- error (file path included) to the user, and 22.05-25.11 accept it, whatever the site chose.
-- Even describing the error may fail (an error object whose tostring raises): then the log line
-- says so without it.
local function fallback(stage, err)
  if not pcall(fallback_logged, stage, err) then
    pcall(slurm.log_info, "%s", TAG .. " decision=" .. (REJECT_ON_ERROR and "reject" or "accept")
      .. " internal-error stage=" .. stage .. " (the error itself could not be printed)")
  end
  if REJECT_ON_ERROR then
    user(INTERNAL_REJECT)
    return ERROR_CODE
  end
  return SUCCESS
end

-- A GPU job on a partition the site does not describe: one log line per name per slurmctld
-- (until the script reloads), never a rejection.
local function log_unknown(v)
  local lines = P.unknown_log_lines(v)
  for i = 1, #lines do log(lines[i]) end
end

-- policy.repair_segment (Slurm 25.11+, where job_desc.segment_size is writable): set the
-- --segment the policy computed and say so in the job's AdminComment.
local function repair_segment(desc, v)
  local k = v.repair_segment
  if k == nil or v.code ~= SUCCESS then return end
  local ok = pcall(function() desc.segment_size = k end)
  if not ok or num(get(desc, "segment_size")) ~= k then
    v.code = P.REJECT_CODE
    v.decision = "reject"
    v.messages[#v.messages + 1] = string.format(
      "slurmgpu: this job needs --segment=%d and the controller could not set it; resubmit with --segment=%d.", k, k)
    return
  end
  local note = string.format("slurmgpu: set --segment=%d (model-parallel groups inside one NVLink domain)", k)
  local prev = str(get(desc, "admin_comment"))
  pcall(function() desc.admin_comment = prev and (prev .. "; " .. note) or note end)
end

-- The audit trail: the verdict token appended to the job's AdminComment (`sacct -o
-- AdminComment`), after whatever the site (or an earlier plugin) put there, which is kept; an
-- earlier slurmgpu token is replaced. A rejected job gets no record, so it is not written then.
local AUDIT_OLD = "slurmgpu=[%w%-_:,+]*"
local ADMIN_COMMENT_MAX = 1024 -- a site's own text longer than this is kept, the token not added

local function audit(desc, v)
  if v.code ~= SUCCESS then return end
  local old = get(desc, "admin_comment")
  if type(old) ~= "string" then old = "" end
  old = string.gsub(string.gsub(old, "%s*" .. AUDIT_OLD, ""), "^%s+", "")
  if #old > ADMIN_COMMENT_MAX then
    log(TAG .. " warning admin-comment: the job's AdminComment is over " .. ADMIN_COMMENT_MAX
      .. " bytes; the verdict token was not added")
    return
  end
  local token = P.audit_token(v)
  local new = old == "" and token or (old .. " " .. token)
  local ok, err = pcall(function() desc.admin_comment = new end)
  if not ok then log(TAG .. " warning admin-comment: cannot set AdminComment: " .. P.clean(err, 200)) end
end

-- The jobs accepted from their fields alone (P.decide_single_node) are logged as a count: one
-- summary line per partition, written by the first submission at least TOPO.single_node_log_s
-- seconds after the first job it counts (0: a line per job, as every other verdict has). A log
-- line per submission is most of what such a job costs the controller (each line is written
-- twice on a 22.05 controller under systemd: the log file and the journal); each job keeps its
-- own record, the AdminComment token. Counts not yet written are lost when slurmctld stops or
-- this script reloads (at most one window's), and `slurmgpu admin stats` dates them at the line.
local SUMMARY_S = tonumber(TOPO.single_node_log_s) or 60
local SUMMARY_PARTS = 64 -- partition names counted in one window (more: written at once)
local quiet_since, quiet_order, quiet_count = nil, {}, {}

local function flush_quiet(now)
  local since = quiet_since
  for i = 1, #quiet_order do
    local part = quiet_order[i]
    log(string.format("%s decision=accept code=0 origin=job_submit partition=%s count=%d "
      .. "window_s=%d verdict=ok", TAG, part, quiet_count[part], now - since))
  end
  quiet_since, quiet_order, quiet_count = nil, {}, {}
end

-- counted per partition and source: single-node (decided from the fields), batch-step (deferred)
local function count_quiet(job, now, source)
  local part = P.clean(job.partition or ("(default " .. tostring(job.default_partition or "?") .. ")"), 64)
  local key = part .. " source=" .. source
  if quiet_since == nil then quiet_since = now end
  local n = quiet_count[key]
  if n == nil then
    quiet_order[#quiet_order + 1] = key
    n = 0
  end
  quiet_count[key] = n + 1
  if now - quiet_since >= SUMMARY_S or #quiet_order >= SUMMARY_PARTS then flush_quiet(now) end
end

-- policy.script_check batch-step: the job's script, arguments and environment are left unread
-- (P.deferrable says which jobs); the SPANK plugin reads them at the batch step.
local DEFER = TOPO.script_check == "batch-step"
local function defer(job)
  rawset(job, READ.script, true)
  rawset(job, READ.env, true)
  rawset(job, "argv", {})
end

-- slurmctld's path: a job that runs on one node wherever it may run, and is no het component, is
-- decided from its fields alone (P.decide_single_node: no TP group of it can span nodes); its
-- script is read only by `slurmgpu check`, cli_filter and SPANK, which give the advice. On a
-- policy.script_check batch-step site a job that may span nodes is judged without its script,
-- arguments and environment too (P.deferrable), and the SPANK plugin judges them at its batch step.
local function submit(desc, part_list, uid)
  local now = os.time()
  if quiet_since ~= nil and now - quiet_since >= SUMMARY_S then flush_quiet(now) end
  local job = job_from_desc(desc, part_list, uid)
  local single = P.decide_single_node(job, TOPO)
  local deferred = single == nil and DEFER and P.deferrable(job, TOPO)
  if deferred then defer(job) end
  local v = single or P.decide(job, TOPO)
  if deferred and not v.exempt and v.source == "none" then -- nothing read: the batch step finds the layout
    v.source, v.layout = "batch-step", {tp = "-", pp = "-", cp = "-", ep = "-"}
  end
  if job.bitflags == nil and flags_unreadable(get(desc, "bitflags")) then
    log(TAG .. " warning bitflags: job_desc.bitflags is 2^53 or more and not exact as a Lua number; "
      .. "--spread-job was not read for this job")
  end
  repair_segment(desc, v)
  if (single or deferred) and SUMMARY_S > 0 and v.code == SUCCESS and not v.exempt and #v.messages == 0
      and #v.warnings == 0 then
    count_quiet(job, now, v.source)
  else
    log(P.log_line(v, job))
  end
  audit(desc, v)
  log_unknown(v)
  for i = 1, #v.messages do user(v.messages[i]) end
  for i = 1, #v.warnings do user(v.warnings[i]) end
  return v.code
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, code = pcall(submit, job_desc, part_list, submit_uid)
  if ok and type(code) == "number" then return code end
  if ok then code = "non-numeric verdict code" end
  return fallback("submit", code)
end

-- Fields whose change can move TP groups across nodes (scontrol update of a pending job).
-- Any change of nodes, tasks, CPUs or GPUs re-checks the job (NumCPUs= can force more nodes).
local MODIFY_STR = {"tres_per_node", "gres", "tres_per_job", "tres_per_task", "tres_per_socket", "partition",
                    "req_nodes", "cpus_per_tres"}
local MODIFY_NUM = {"min_nodes", "max_nodes", "num_tasks", "ntasks_per_node", "sockets_per_node", "cpus_per_task",
                    "ntasks_per_gpu", "ntasks_per_tres"}
local MODIFY_NUM32 = {"min_cpus", "max_cpus"}

local function modify(desc, rec, part_list, uid)
  local changed = {}
  for i = 1, #MODIFY_STR do
    if str(get(desc, MODIFY_STR[i])) then changed[#changed + 1] = MODIFY_STR[i] end
  end
  for i = 1, #MODIFY_NUM do
    if num(get(desc, MODIFY_NUM[i])) then changed[#changed + 1] = MODIFY_NUM[i] end
  end
  for i = 1, #MODIFY_NUM32 do
    if num32(get(desc, MODIFY_NUM32[i])) then changed[#changed + 1] = MODIFY_NUM32[i] end
  end
  if #changed == 0 then return SUCCESS end
  if uid == 0 then
    log(TAG .. " decision=accept origin=job_modify uid=0 (admin update of " .. table.concat(changed, ",") .. ")")
    return SUCCESS
  end
  local function pick_str(k) return str(get(desc, k)) or str(get(rec, k)) end
  local function pick_num(k) return num(get(desc, k)) or num(get(rec, k)) end
  -- The stored script is read from StateSaveLocation: only on this rare path, and once.
  local script = get(rec, "script")
  if type(script) ~= "string" then script = nil end
  -- What the update leaves, from the job: no release exposes num_tasks, ntasks_per_node or
  -- cpus_per_task on the job record, so from the script's #SBATCH lines, else from the record's
  -- CPUs (pn_min_cpus is ntasks_per_node x cpus_per_task; min_cpus is num_tasks x cpus_per_task).
  local dirs = P.sbatch_directives(script)
  local cpt = num(get(desc, "cpus_per_task")) or dirs.cpus_per_task
  local per_node_cpus = num(get(rec, "pn_min_cpus"))
  local tpn = num(get(desc, "ntasks_per_node")) or dirs.ntasks_per_node
  if tpn == nil and per_node_cpus and per_node_cpus >= 2 * (cpt or 1) then
    tpn = math.floor(per_node_cpus / (cpt or 1))
  end
  local rec_cpus = num32(get(rec, "min_cpus"))
  local nt = num(get(desc, "num_tasks")) or dirs.num_tasks
  if nt == nil and rec_cpus and rec_cpus >= 2 then nt = math.floor(rec_cpus / (cpt or 1)) end
  -- The record's max_nodes caps the node count only when the update leaves tasks and CPUs as
  -- they are: slurmctld raises it itself for more tasks (26.05 records max_nodes=1 for a
  -- -n8 --ntasks-per-node=8 job and logs "setting max_nodes from 1 to 2" on NumTasks=16).
  local nmax = num(get(desc, "max_nodes"))
  if nmax == nil and not (num(get(desc, "num_tasks")) or num(get(desc, "ntasks_per_node"))
      or num(get(desc, "cpus_per_task")) or num(get(desc, "ntasks_per_tres")) or num32(get(desc, "min_cpus"))) then
    nmax = num(get(rec, "max_nodes"))
  end
  local job = {
    origin = "job_modify",
    script = script,
    argv = {},
    partition = pick_str("partition"),
    default_partition = default_partition(part_list),
    nodes_min = pick_num("min_nodes"),
    nodes_max = nmax,
    num_tasks = nt,
    ntasks_per_node = tpn,
    tres_per_node = str(get(desc, "tres_per_node")) or str(get(desc, "gres")) or str(get(rec, "tres_per_node")),
    tres_per_job = pick_str("tres_per_job"),
    tres_per_task = pick_str("tres_per_task"),
    tres_per_socket = pick_str("tres_per_socket"),
    sockets_per_node = num(get(desc, "sockets_per_node")),
    cpus_per_task = cpt,
    min_cpus = num32(get(desc, "min_cpus")) or rec_cpus,
    ntasks_per_tres = num(get(desc, "ntasks_per_tres")) or dirs.ntasks_per_tres,
    cpus_per_tres = pick_str("cpus_per_tres"),
    req_nodes = str(get(desc, "req_nodes")),
    user = str(get(rec, "user_name")),
    uid = uid_of(get(rec, "user_id")),
    account = pick_str("account"),
    qos = pick_str("qos"),
  }
  if job.user == nil and job.uid ~= nil then job.user = tostring(job.uid) end
  local v = P.decide(job, TOPO)
  log(P.log_line(v, job) .. " changed=" .. table.concat(changed, ","))
  log_unknown(v)
  -- Before 23.02 log_user in job_modify only logs an error; 23.02 is also the release that
  -- exports every ESLURM_* name, which is how the version is told apart here.
  if slurm.ESLURM_INVALID_GRES ~= nil then
    for i = 1, #v.messages do user(v.messages[i]) end
  end
  return v.code
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local ok, code = pcall(modify, job_desc, job_rec, part_list, modify_uid)
  if ok and type(code) == "number" then return code end
  if ok then code = "non-numeric verdict code" end
  return fallback("modify", code)
end

-- For `slurmgpu check` and tests (a global so a harness can reach it; slurmctld ignores it).
slurmgpu_filter = {evaluate_desc = evaluate_desc, job_from_desc = job_from_desc, policy = P, topo = TOPO}

return SUCCESS
