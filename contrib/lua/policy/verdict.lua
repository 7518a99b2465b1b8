-- verdict: the verdict table, and the findings of the rules put into it under their mode
-- (enforce: a rejection; warn: a warning that says it is not enforced; shadow: kept from the
-- user; off: dropped).

local import = ...
local sub, format = string.sub, string.format
local LENIENCY = import("modes", "LENIENCY")


local function new_verdict()
  return {decision = "accept", code = 0, messages = {}, warnings = {}, layout = {tp = 1, pp = 1, cp = 1, ep = 1},
          source = "none", launcher = "", partitions = {}, rules = {}, mode = "enforce", exempt = false,
          unknown_partitions = {}, notes = {}, shadow_messages = {}, shadow_warnings = {}, would = "accept"}
end

local function push_unique(list, seen, text)
  if not seen[text] then
    seen[text] = true
    list[#list + 1] = text
  end
end

-- seen[k], made on first use (most verdicts push nothing).
local function seen_in(seen, k)
  local t = seen[k]
  if t == nil then t = {}; seen[k] = t end
  return t
end


-- The findings of one partition check into the verdict, each under its mode (seen: the texts
-- already in each list: m messages, w warnings, r rules).
local function apply_findings(v, seen, topo, findings, mode, why, suffix)
  for j = 1, #findings do
    local f = findings[j]
    local text = suffix and (f.text .. suffix) or f.text
    local fmode, fwhy = mode, why
    if f.mode and LENIENCY[f.mode] > LENIENCY[fmode] then
      fmode, fwhy = f.mode, "policy.groups." .. sub(f.rule, 1, 2)
    end
    if fmode ~= "off" then push_unique(v.rules, seen_in(seen, "r"), f.rule) end
    if fmode == "off" then -- luacheck: ignore 542 (this kind of group is not checked here)
    elseif f.sev == "reject" and fmode == "enforce" and f.repair and topo.repair_segment
        and (v.repair_segment == nil or v.repair_segment == f.repair) then
      -- Slurm 25.11+: job_submit may write job_desc.segment_size, so the job is repaired
      v.repair_segment = f.repair
      push_unique(v.warnings, seen_in(seen, "w"), text .. format(
        " (repaired: this cluster set --segment=%d for the job)", f.repair))
    elseif f.sev == "reject" and fmode == "enforce" then
      push_unique(v.messages, seen_in(seen, "m"), text)
    elseif fmode == "shadow" then
      push_unique(f.sev == "reject" and v.shadow_messages or v.shadow_warnings, seen_in(seen, "w"), text)
    elseif f.sev == "reject" then
      push_unique(v.warnings, seen_in(seen, "w"), text .. format(" (not enforced: warn-only for %s)", fwhy))
    else
      push_unique(v.warnings, seen_in(seen, "w"), text)
    end
  end
end

return {new_verdict = new_verdict, push_unique = push_unique, seen_in = seen_in, apply_findings = apply_findings}
