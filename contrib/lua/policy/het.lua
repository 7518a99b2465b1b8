-- het: srun --het-group steps of a het job that run over several components, judged once the
-- last component they name is submitted, on the components' nodes together.

local import = ...
local byte, sub, match, gsub, format = string.byte, string.sub, string.match, string.gsub, string.format
local each_find, spend = import("budget", "each_find", "spend")
local det_subset = import("detect", "det_subset")
local command_range, in_comment = import("lexer", "command_range", "in_comment")
local mode_for = import("modes", "mode_for")
local check_partition = import("partition", "check_partition")
local partitions_of = import("partitions", "partitions_of")
local gpu_shape, job_nodes = import("shape", "gpu_shape", "job_nodes")
local clean, plural = import("util", "clean", "plural")
local add_finding = import("fix", "add_finding")
local resolve_text = import("shellvars", "resolve_text")
local script_facts = import("distribution", "script_facts")
local apply_findings, push_unique, seen_in = import("verdict", "apply_findings", "push_unique", "seen_in")


-- The components a --het-group list names ("0,1", "0-2", "[0-1]"): set, count, top; nil if
-- unreadable. At most 64 components.
local function component_set(list)
  if list == nil or #list > 256 then return nil end
  list = match(list, "^%[?([%d,%-]+)%]?$")
  if list == nil then return nil end
  local set, count, top = {}, 0, -1
  for item in string.gmatch(list, "[^,]+") do
    local a, z = match(item, "^(%d+)%-(%d+)$")
    if a == nil then a = match(item, "^(%d+)$"); z = a end
    if a == nil or #a > 3 or #z > 3 then return nil end
    for k = tonumber(a), math.min(tonumber(z), tonumber(a) + 64) do
      if not set[k] then set[k] = true; count = count + 1 end
      if k > top then top = k end
    end
    if count > 64 then break end
  end
  return set, count, top
end

-- srun's option naming the components of a step: --het-group and every prefix getopt_long
-- accepts down to --het, and the old --pack-group down to --pack.
local function het_option(name)
  return (#name >= 3 and sub("het-group", 1, #name) == name) or (#name >= 4 and sub("pack-group", 1, #name) == name)
end

-- Steps of a het job's script (and command line) that run over two or more components:
-- {set = {offset = true}, top, ls, le, text, doc} ([ls, le]: the whole command). Spelled
-- --het-group=LIST in any form srun takes (quoted, bracketed, abbreviated, from a variable),
-- or the MPMD form `srun A : B`, whose parts run on components 0, 1, ... in order.
local function het_steps(det, env)
  local out = {}
  for di = 1, #det.docs do
    local doc = det.docs[di]
    local s = doc.t
    for _, stem in ipairs({"--het", "--pack"}) do -- --het-group LIST and its spellings
      local r = each_find(det, s, stem, 1, doc.n, "work budget (het steps)", 64, function(h)
        local name, rest = match(s, "^%-%-([%a%-]+)()", h)
        if name and het_option(name) and not in_comment(doc, h) then
          local raw = match(s, "^[= \t]+([^ \t\r\n;&|]+)", rest)
          local text = raw and gsub(raw, "[\"']", "")
          local var = text and (match(text, "^%${([%a_][%w_]*)}$") or match(text, "^%$([%a_][%w_]*)$"))
          if var then
            text = resolve_text(det, doc, {k = "var", name = var}, h, env, 0)
            out.from_variable = true -- may come from this job's environment: not kept for another
          end
          local set, count, top = component_set(text)
          if set and count >= 2 then
            local ls, le = command_range(doc, h)
            out[#out + 1] = {set = set, top = top, ls = ls, le = le, text = clean(gsub(raw, "[\"']", ""), 24),
                             doc = doc}
          end
        end
        if not spend(det, 64, "work budget (het steps)", h) then return "budget" end
        return nil
      end)
      if r == "budget" then return out end
    end
  end
  -- srun A : B (MPMD): a step over components 0..k
  local f = script_facts(det)
  for i = 1, #f.cmds do
    local c = f.cmds[i]
    local s = c.doc.s
    local k = 0
    each_find(det, s, ":", c.srun, c.b, "work budget (het steps)", 4096, function(h)
      local pb, nb = byte(s, h - 1), byte(s, h + 1)
      if (pb == 32 or pb == 9) and (nb == 32 or nb == 9 or nb == 13 or nb == 10 or nb == 92) then k = k + 1 end
      return k >= 64 or nil
    end)
    if k >= 1 then
      local set = {}
      for j = 0, k do set[j] = true end
      out[#out + 1] = {set = set, top = k, ls = c.a, le = c.b, text = "A : B (MPMD)", doc = c.doc, mpmd = true}
    end
  end
  return out
end

-- The nodes of the components a step names, and the smallest GPU count per node among them;
-- nil when a component's partition or GPUs per node are unknown.
local function step_shape(comps, set, top, parts, topo)
  local nodes, gpn = 0, nil
  for k = 0, top do
    if set[k] then
      local c = comps[k]
      local cp = c and parts[partitions_of(c, topo)[1] or ""]
      if type(cp) ~= "table" then return nil end
      local g = gpu_shape(c, cp)
      local per = g.per_node
      if per == nil then return nil end
      if per > cp.gpus then per = cp.gpus end
      nodes = nodes + job_nodes(c, cp, g, cp.gpus).min
      if gpn == nil or per < gpn then gpn = per end
    end
  end
  return nodes, gpn
end

-- Rule het-step. A het job's step over several components (srun --het-group=0,1, srun A : B)
-- runs over all their nodes: judged once the last component it names is submitted, on their
-- nodes together (GPUs per node: the smallest), with the TP flags on that srun command (all the
-- script's when it shows none, e.g. the command sits in a variable). The message names the
-- step and its span.
local function judge_het_steps(v, ctx, names, parts)
  local job, det, topo, seen = ctx.job, ctx.det, ctx.topo, ctx.seen
  local comps = job.het_components
  if type(comps) ~= "table" or job.het_offset == nil then return end
  if det.truncated and job.het_offset >= 1 then
    -- the unread rest could hold a step over the components so far: they span several nodes
    local all = {}
    for k = 0, job.het_offset do all[k] = true end
    local nodes = step_shape(comps, all, job.het_offset, parts, topo)
    if nodes == nil or nodes > 1 then
      add_finding(ctx.het_out, "reject", "scan-truncated", format(
        "the script is too large or repetitive to check completely (the filter's %s ran out), so this het job "
          .. "(components 0-%d, %s) cannot be cleared: a step over several components may start in the part "
          .. "not read. Fix: keep the batch script short (move data and generated configs into files).",
        tostring(det.limit or "scan"), job.het_offset, nodes and plural(nodes, "node") or "several nodes"))
    end
  end
  local steps = det.het_steps -- once per detection (a het job's components share one)
  if steps == nil then
    steps = het_steps(det, job.env)
    if not steps.from_variable then det.het_steps = steps end
  end
  for si = 1, #steps do
    local st = steps[si]
    if st.top == job.het_offset then
      local nodes, gpn = step_shape(comps, st.set, st.top, parts, topo)
      local sdet = nodes and det_subset(det, function(e)
        return e.rec.doc == st.doc and e.rec.pos >= st.ls and e.rec.pos <= st.le
      end)
      if sdet and not sdet.values.tp then sdet = det end -- no TP flag on the command: every TP flag counts
      if nodes and gpn and sdet.values.tp then
        local hjob = setmetatable({nodes_min = nodes, nodes_max = nodes, gpus_per_node = gpn, num_tasks = false,
          ntasks_per_node = false, req_nodes = false, min_cpus = false, cpus_per_task = false, bitflags = false},
          {__index = job})
        local hctx = {job = hjob, det = sdet, layouts = {}, topo = topo, shapes = {}}
        local named = {}
        for k = 0, st.top do if st.set[k] then named[#named + 1] = tostring(k) end end
        local suffix = format(" (het step: %s runs one step over components %s: %s with %s each)",
          st.mpmd and "srun A : B" or ("srun --het-group=" .. clean(st.text, 24)), table.concat(named, " and "),
          plural(nodes, "node"), plural(gpn, "GPU"))
        for i = 1, #names do
          local part = parts[names[i]]
          if type(part) == "table" then
            local mode, why = mode_for(topo, part, sdet.launcher, names[i])
            if mode ~= "off" then
              apply_findings(v, seen, topo, check_partition(hctx, names[i], part), mode, why, suffix)
            end
          end
        end
        push_unique(v.rules, seen_in(seen, "r"), "het-step")
      end
    end
  end
  if #ctx.het_out > 0 then
    for i = 1, #names do
      local part = parts[names[i]]
      if type(part) == "table" then
        local mode, why = mode_for(topo, part, det.launcher, names[i])
        if mode ~= "off" then apply_findings(v, seen, topo, ctx.het_out, mode, why) end
        break
      end
    end
  end
end

return {judge_het_steps = judge_het_steps}
