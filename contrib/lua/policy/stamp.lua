-- stamp: the slurmgpu stamp line of generated scripts,
-- '# slurmgpu: site=... tp=8 pp=2 ...' at the start of a line (slurmgpu/stamp.py writes it).

local import = ...
local find, sub, match = string.find, string.sub, string.match
local spend = import("budget", "spend")
local line_start = import("lexer", "line_start")
local clean, int = import("util", "clean", "int")


-- The slurmgpu stamp: '# slurmgpu: site=... tp=8 pp=2 ...' at the start of a line.
local STAMP_KEYS = {tp = true, pp = true, dp = true, cp = true, ep = true, nodes = true, gpus_per_node = true}
local STAMP_AREA = 65536 -- the generator writes the stamp at the top; only this much is searched
local function find_stamp(doc)
  local s, p = doc.t, 1
  if #s > STAMP_AREA then s = sub(s, 1, STAMP_AREA) end
  if not spend(doc.det, #s, "work budget (stamp search)") then return nil end
  for _ = 1, 64 do
    local h = find(s, "# slurmgpu:", p, true)
    if h == nil then return nil end
    p = h + 11
    local ls = line_start(doc, h)
    if h - ls <= 64 and match(sub(s, ls, h - 1), "^[ \t]*$") then
      local nl = find(s, "\n", h, true) -- s is at most STAMP_AREA bytes
      local w = sub(s, h + 11, math.min(nl and (nl - 1) or #s, h + 600))
      local st = {}
      local pos = 1
      for _ = 1, 16 do
        local k, v, e = match(w, "^[ \t]+([%w_]+)=([^ \t\r\n]*)()", pos)
        if k == nil then break end
        pos = e
        if STAMP_KEYS[k] then
          st[k] = (match(v, "^%d+$") and int(v)) or nil
        elseif k == "site" then
          st.site = clean(v, 64)
        end
      end
      if st.tp then return st end
    end
  end
  return nil
end

return {find_stamp = find_stamp}
