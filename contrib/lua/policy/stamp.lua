-- stamp: the slurmgpu stamp line of generated scripts,
-- '# slurmgpu: site=... tp=8 pp=2 ...' at the start of a line (slurmgpu/stamp.py writes it).

local import = ...
local find, sub, match = string.find, string.sub, string.match
local spend = import("budget", "spend")
local line_start = import("lexer", "line_start")
local code_spans = import("shell", "code_spans")
local clean, int = import("util", "clean", "int")


-- The slurmgpu stamp: '# slurmgpu: site=... tp=8 pp=2 ...' at the start of a line.
local STAMP_KEYS = {tp = true, pp = true, dp = true, cp = true, ep = true, nodes = true, gpus_per_node = true}
local STAMP_AREA = 65536 -- the generator writes the stamp at the top; only this much is searched

-- The stamp at h (a marker at a line start), or nil.
local function stamp_at(doc, s, h)
  local ls = line_start(doc, h)
  if h - ls > 64 or not match(sub(s, ls, h - 1), "^[ \t]*$") then return nil end
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
  return st.tp and st or nil
end

local function find_stamp(doc)
  local s = doc.t
  if #s > STAMP_AREA then s = sub(s, 1, STAMP_AREA) end
  local left = 64
  local spans = code_spans(doc) -- (a data here-document's text is no stamp)
  for j = 1, #spans do
    local a, b = spans[j][1], spans[j][2]
    if a > #s then break end
    if b > #s then b = #s end
    -- (one unit a byte: a flood of '#' costs ~4 ns a byte, at most 0.3 ms for the 64 kB searched)
    if not spend(doc.det, b - a + 1, "work budget (stamp search)") then return nil end
    local w = (a == 1 and b == #s) and s or sub(s, 1, b)
    local p = a
    while left > 0 do
      local h = find(w, "# slurmgpu:", p, true)
      if h == nil then break end
      left = left - 1
      p = h + 11
      local st = stamp_at(doc, s, h)
      if st then return st end
    end
  end
  return nil
end

return {find_stamp = find_stamp}
