-- exempt: exemptions by user, account or QOS (accounts and QOS only where accounting
-- validates them), and the job's user name (resolved only where needed).

local import = ...
local format = string.format
local clean, in_list, nonempty = import("util", "clean", "in_list", "nonempty")


-- Whether accounting makes Slurm refuse a job's -A / --qos that its user may not use: only then
-- can an account or QOS exemption be trusted (job_submit sees the raw, unvalidated strings).
-- topo.accounting_enforce lists the site's AccountingStorageEnforce words (`admin install`
-- checks them against slurm.conf); "qos" implies "associations", as in Slurm.
local function enforces(topo, what)
  local e = topo.accounting_enforce
  if type(e) ~= "table" then return false end
  if what == "associations" and in_list(e, "qos") then return true end
  return in_list(e, what)
end

-- Why the job is exempt (nil: it is not), and a note when an account/QOS exemption matched
-- but is not honoured (anyone can type -A or --qos where accounting does not validate them).
-- The job's user name: job.user, else job.lookup_user(job) once (job_submit: reading user_name
-- makes slurmctld resolve the uid through NSS, an LDAP query on many sites, so only exemptions
-- by name and lines that are not a plain accept ask), else the uid as text.
local function user_of(job)
  local u = job.user
  if u == nil and job.lookup_user ~= nil then
    local ok, name = pcall(job.lookup_user, job)
    if ok and type(name) == "string" and name ~= "" then u = name end
    job.lookup_user = nil
    job.user = u
  end
  if u == nil and job.uid ~= nil then return tostring(job.uid) end
  return u
end

local function exempt_reason(job, topo)
  local eu = topo.exempt_users
  if type(eu) == "table" and eu[1] ~= nil then
    local u = user_of(job)
    if in_list(eu, u) then return "user " .. clean(u, 32) end
    if job.uid ~= nil and in_list(eu, tostring(job.uid)) then return "uid " .. tostring(job.uid) end
  end
  local note
  if nonempty(topo.exempt_accounts) and in_list(topo.exempt_accounts, job.account) then
    if enforces(topo, "associations") then return "account " .. clean(job.account, 32) end
    note = format("slurmgpu: account '%s' is exempt in the site config, but this cluster's accounting does not "
      .. "validate accounts at submit (AccountingStorageEnforce lacks associations), so the exemption is not "
      .. "applied and the job is checked.", clean(job.account, 32))
  end
  if nonempty(topo.exempt_qos) and in_list(topo.exempt_qos, job.qos) then
    if enforces(topo, "qos") then return "qos " .. clean(job.qos, 32) end
    note = note or format("slurmgpu: QOS '%s' is exempt in the site config, but this cluster's accounting does "
      .. "not validate QOS at submit (AccountingStorageEnforce lacks qos), so the exemption is not applied and "
      .. "the job is checked.", clean(job.qos, 32))
  end
  return nil, note
end

return {exempt_reason = exempt_reason, user_of = user_of}
