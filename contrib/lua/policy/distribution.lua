-- distribution: where srun puts consecutive tasks. Launchers that take the rank from the task
-- (Megatron-LM or vLLM under srun, one task per GPU) number ranks in task order, so srun's node
-- distribution decides whether a TP group of consecutive ranks stays on one node: block fills a
-- node before the next, cyclic deals tasks out one per node in turn, plane=P deals blocks of P.
--
-- Read from everything srun reads it from: -m / --distribution (any prefix getopt_long accepts,
-- down to --dist) on the srun command, SLURM_DISTRIBUTION in front of it, the script's last
-- `export SLURM_DISTRIBUTION=...` before it, and the job environment (sbatch -m and
-- #SBATCH --distribution set SLURM_DISTRIBUTION there; so may the user's shell). In a running
-- step (SPANK) the task layout itself is known: SLURM_GTIDS, the task ids on this node.

local import = ...
local find, sub, byte, match, lower = string.find, string.sub, string.byte, string.match, string.lower
local each_find, spend = import("budget", "each_find", "spend")
local code_spans = import("shell", "code_spans")
local command_range, in_comment = import("lexer", "command_range", "in_comment")
local clean, env_get, line_number = import("util", "clean", "env_get", "line_number")

-- The node part of a distribution value ("cyclic:block,pack" -> cyclic) -> kind, plane size.
-- nil for a word that is no distribution (python -m torch.distributed.run).
local function node_dist(word)
  if type(word) ~= "string" or #word > 64 then return nil end
  local node = lower(match(word, "^[\"']?([^:,\"']*)") or "")
  if node == "block" or node == "*" then return "block" end
  if node == "cyclic" then return "cyclic" end
  if node == "arbitrary" then return "arbitrary" end
  if node == "plane" then return "plane" end
  local p = match(node, "^plane=(%d+)$")
  if p and #p <= 6 then return "plane", tonumber(p) end
  return nil
end

-- The distribution options in the text [a, b] of one srun command: the last -m/--dist... value
-- that names a distribution, with its position.
local function options_in(s, a, b)
  local text = sub(s, a, b)
  local word, at
  local p = 1
  for _ = 1, 32 do -- --distribution and its prefixes down to --dist
    local h = find(text, "--dist", p, true)
    if h == nil then break end
    p = h + 6
    local name, rest = match(text, "^%-%-(dist[%a]*)()", h)
    if name and sub("distribution", 1, #name) == name then
      local v = match(text, "^=([^ \t\r\n]+)", rest) or match(text, "^[ \t]+\\?\r?\n?[ \t]*([^ \t\r\n]+)", rest)
      if node_dist(v) then word, at = v, a + h - 1 end
    end
  end
  p = 1
  for _ = 1, 32 do -- -m VALUE, -mVALUE
    local h = find(text, "-m", p, true)
    if h == nil then break end
    p = h + 2
    local c = byte(text, h - 1)
    if c == nil or c == 32 or c == 9 or c == 10 then
      local v = match(text, "^([^ \t\r\n]+)", h + 2)
      if v == nil then v = match(text, "^[ \t]+\\?\r?\n?[ \t]*([^ \t\r\n]+)", h + 2) end
      if node_dist(v) then word, at = v, a + h - 1 end
    end
  end
  local pre = match(text, "SLURM_DISTRIBUTION=([^ \t\r\n]+)[ \t]+[^\n]*srun")
  if word == nil and node_dist(pre) then word, at = pre, a end
  return word, at
end

-- Script facts, once per detection: the srun commands {a, b, word, at} (word: their own
-- distribution, if any) and the script's SLURM_DISTRIBUTION assignments {pos, word}.
local CMD_BYTE_COST = 10 -- per byte of a srun command: the searches of options_in and the patterns
local MAX_CMDS = 256
local SRUN_PREV = {[32] = true, [9] = true, [10] = true, [59] = true, [38] = true, [124] = true, [40] = true,
                   [96] = true, [34] = true, [39] = true, [47] = true}
local SRUN_NEXT = {[32] = true, [9] = true, [10] = true, [13] = true, [34] = true, [39] = true, [92] = true}
local function script_facts(det)
  if det.dist_facts then return det.dist_facts end
  local f = {cmds = {}, assign = {}}
  det.dist_facts = f
  for i = 1, #det.docs do
    local doc = det.docs[i]
    local s = doc.t
    local spans = code_spans(doc) -- (a data here-document's "srun" is no command)
    for j = 1, #spans do
      local after = 0 -- the end of the last command found (an "srun" inside it is an argument)
      local r = each_find(det, s, "srun", spans[j][1], spans[j][2], "work budget (srun commands)", 65536, function(h)
        if h <= after then return nil end
        local pc, nc = byte(s, h - 1), byte(s, h + 4)
        if (pc == nil or SRUN_PREV[pc]) and (nc == nil or SRUN_NEXT[nc]) and not in_comment(doc, h) then
          local a, b = command_range(doc, h)
          if #f.cmds >= MAX_CMDS or not spend(det, CMD_BYTE_COST * (b - a + 1), "work budget (srun commands)", h) then
            det.truncated = true
            if not det.limit then det.limit = "work budget (srun commands)" end
            return "budget"
          end
          local word, at = options_in(doc.s, a, b)
          -- a step of one task per node (a preflight, a torchrun per node) never splits a TP group
          local one = match(sub(doc.s, h, b), "^srun[^\n]-%-%-ntasks%-per%-node[= ]1[ \t\r\n\\]")
          f.cmds[#f.cmds + 1] = {a = a, b = b, word = word, at = at, doc = doc, srun = h, one_per_node = one ~= nil}
          after = b
        end
        return nil
      end)
      if r == "budget" then f.truncated = true; return f end
      r = each_find(det, s, "SLURM_DISTRIBUTION=", spans[j][1], spans[j][2], "work budget (srun commands)", 4096,
        function(h)
          local pc = byte(s, h - 1)
          if (pc == nil or pc == 32 or pc == 9 or pc == 10 or pc == 59) and not in_comment(doc, h) then
            local v = match(s, "^([^ \t\r\n;]+)", h + 19)
            f.assign[#f.assign + 1] = {pos = h, word = v, doc = doc}
          end
          return nil
        end)
      if r == "budget" then f.truncated = true; return f end
    end
  end
  return f
end

-- The distribution a srun command at position pos of doc inherits: the script's last
-- SLURM_DISTRIBUTION assignment before it, else the job environment's.
local function inherited(f, job, doc, pos)
  local best
  for i = 1, #f.assign do
    local x = f.assign[i]
    if x.doc == doc and x.pos < pos then best = x end
  end
  if best then return best.word, "SLURM_DISTRIBUTION=" .. clean(best.word or "", 24), best end
  local e = env_get(job.env, "SLURM_DISTRIBUTION")
  if e and #e <= 64 then return e, "SLURM_DISTRIBUTION=" .. clean(e, 24) .. " in the job environment" end
  return nil
end

-- The launch's distribution (the worst of the srun commands that may start the TP ranks):
-- {kind, plane, why, doc, pos}. kind "block" when nothing says otherwise.
local function launch_distribution(det, job)
  local f = script_facts(det)
  local rec = det.tp_best
  local cands = {}
  for i = 1, #f.cmds do
    local c = f.cmds[i]
    if rec and rec.doc == c.doc and rec.pos >= c.a and rec.pos <= c.b then cands = {c}; break end
    if not c.one_per_node then cands[#cands + 1] = c end
  end
  local worst = {kind = "block"}
  local function consider(word, why, doc, pos)
    local kind, plane = node_dist(word)
    if kind == nil then
      if word == nil then return end
      kind = "unknown"
    end
    if kind == "plane" and plane == nil then
      plane = tonumber(env_get(job.env, "SLURM_DIST_PLANESIZE") or "")
    end
    if kind ~= "block" and worst.kind == "block" then
      worst = {kind = kind, plane = plane, why = why, doc = doc, pos = pos, word = word}
    end
  end
  if #cands == 0 and #f.cmds == 0 then -- no srun seen (a variable, another launcher): what it inherits
    local word, why, x = inherited(f, job, nil, math.huge)
    consider(word, why, x and x.doc, x and x.pos)
  end
  for i = 1, #cands do
    local c = cands[i]
    if c.word then
      consider(c.word, "srun " .. (sub(c.doc.s, c.at, c.at + 1) == "-m" and "-m " or "--distribution=")
        .. clean(c.word, 24), c.doc, c.at)
    else
      local word, why, x = inherited(f, job, c.doc, c.srun)
      consider(word, why, x and x.doc, x and x.pos)
    end
  end
  return worst
end

-- Whether a TP group of tp consecutive ranks spans nodes under distribution d over n nodes;
-- and the words of why.
local function group_spans(d, tp, n)
  if d.kind == "block" or tp <= 1 or n <= 1 then return false end
  if d.kind == "cyclic" then
    return true, "deals ranks out one per node in turn, so ranks 0-" .. (tp - 1) .. " of one TP group land on "
      .. (tp < n and tp or n) .. " nodes"
  end
  if d.kind == "plane" and d.plane then
    if d.plane % tp == 0 then return false end
    return true, "deals ranks out in blocks of " .. d.plane .. ", so a TP group of " .. tp
      .. " consecutive ranks is split over nodes"
  end
  return true, "does not say where each rank runs (" .. d.kind .. "), so no TP group can be shown to stay on one node"
end

-- Where d was set, for a message: "srun -m cyclic on script line 9".
local function dist_where(det, d)
  local ln = d.doc and d.doc == det.docs[1] and det.script_doc and d.pos and line_number(d.doc.s, d.pos)
  if ln then return d.why .. " (script line " .. ln .. ")" end
  return d.why
end

-- SPANK: the task ids on this node (SLURM_GTIDS: "0,2,4,6") -> set, count; nil if unknown.
local function local_tasks(env)
  local g = env_get(env, "SLURM_GTIDS")
  if g == nil or #g > 65536 then return nil end
  local set, n = {}, 0
  for id in string.gmatch(g, "%d+") do
    if #id > 9 then return nil end
    set[tonumber(id)] = true
    n = n + 1
    if n > 4096 then return nil end
  end
  if n == 0 then return nil end
  return set, n
end

-- SPANK: the first TP group with ranks on this node and on another: its first rank, or nil.
local function split_group(set, tp)
  local ids = {}
  for id in pairs(set) do ids[#ids + 1] = id end
  table.sort(ids)
  local seen = {}
  for i = 1, #ids do
    local g = math.floor(ids[i] / tp)
    if not seen[g] then
      seen[g] = true
      for r = g * tp, g * tp + tp - 1 do
        if not set[r] then return g * tp end
      end
    end
  end
  return nil
end

return {launch_distribution = launch_distribution, group_spans = group_spans, dist_where = dist_where,
  local_tasks = local_tasks, split_group = split_group, node_dist = node_dist, script_facts = script_facts}
