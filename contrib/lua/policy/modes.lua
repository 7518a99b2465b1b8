-- modes: how strictly a finding is applied: enforce, warn, shadow or off, per partition,
-- per launcher (the more lenient wins) and per kind of group (policy.groups).



-- The rules

-- shadow judges like enforce but tells the user nothing (the would-be verdict goes to the log
-- and the audit token): quieter than warn, stricter than off.
local LENIENCY = {enforce = 1, warn = 2, shadow = 3, off = 4}

local function mode_for(topo, part, launcher, pname)
  local m = part.mode or topo.mode or "enforce"
  if LENIENCY[m] == nil then m = "enforce" end
  local why = "partition '" .. pname .. "'"
  local lm = launcher and type(topo.launchers) == "table" and topo.launchers[launcher]
  if lm and LENIENCY[lm] and LENIENCY[lm] > LENIENCY[m] then
    m = lm
    why = "launcher " .. launcher
  end
  return m, why
end

-- The policy mode for one kind of group (site policy.groups: enforce | warn | off), nil if unset.
local function group_mode(topo, kind)
  local gm = type(topo) == "table" and type(topo.groups) == "table" and topo.groups[kind]
  if gm and LENIENCY[gm] then return gm end
  return nil
end

return {LENIENCY = LENIENCY, mode_for = mode_for, group_mode = group_mode}
