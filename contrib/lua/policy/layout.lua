-- layout: the layout the rules check on one partition: per parameter the visible flags'
-- value (the largest), else the stamp's, else SLURMGPU_*'s; arithmetic values evaluated with
-- the partition's GPUs per node.

local import = ...
local env_layout = import("detect", "env_layout")
local eval_tree = import("shellvars", "eval_tree")


-- One value for a partition: numbers as they are, "gpn" and arithmetic trees evaluated.
local function value_at(det, v, gpn)
  if v == "gpn" then return gpn end
  if type(v) == "table" then
    return eval_tree(v.e, {gpn = gpn, nodes = det.ctx_nodes or 1, tpn = det.ctx_tpn or gpn}, 0)
  end
  return v
end

local function max_of(vals, gpn, det)
  if vals == nil then return nil end
  local best
  for i = 1, #vals do
    local v = value_at(det, vals[i], gpn)
    if type(v) == "number" and (best == nil or v > best) then best = v end
  end
  return best
end

local function min_of(vals, gpn, det)
  if vals == nil then return nil end
  local best
  for i = 1, #vals do
    local v = value_at(det, vals[i], gpn)
    if type(v) == "number" and v > 0 and (best == nil or v < best) then best = v end
  end
  return best
end

-- The layout the rules check, for one partition's GPUs per node: per parameter the visible
-- flags' value (the largest), else the stamp's, else SLURMGPU_*'s.
local LAYOUT_KEYS = {"tp", "pp", "cp", "ep", "dp"}
local function layout_for(det, gpn)
  local L = {tp = 1, pp = 1, cp = 1, ep = 1}
  -- a stamp or SLURMGPU_* layout whose TP the flags contradict describes another job: unused
  local ftp = det.values.tp and max_of(det.values.tp, gpn, det)
  for i = 1, #LAYOUT_KEYS do
    local k = LAYOUT_KEYS[i]
    local v = max_of(det.values[k], gpn, det)
    if v == nil and det.stamp and (ftp == nil or det.stamp.tp == ftp) then v = det.stamp[k] end
    local el = v == nil and env_layout(det)
    if el and (ftp == nil or el.tp == nil or el.tp == ftp) then v = el[k] end
    if type(v) == "number" and v >= 1 then L[k] = v end
  end
  return L
end

return {layout_for = layout_for, min_of = min_of}
