-- het: srun --het-group steps of a het job that run over several components, judged once the
-- last component they name is submitted, on the components' nodes together.

local import = ...
local find, sub, byte, match, format = string.find, string.sub, string.byte, string.match, string.format
local det_subset = import("detect", "det_subset")
local in_comment = import("lexer", "in_comment")
local mode_for = import("modes", "mode_for")
local check_partition = import("partition", "check_partition")
local partitions_of = import("partitions", "partitions_of")
local gpu_shape, job_nodes = import("shape", "gpu_shape", "job_nodes")
local clean, plural = import("util", "clean", "plural")
local apply_findings, push_unique, seen_in = import("verdict", "apply_findings", "push_unique", "seen_in")


-- srun --het-group=LIST steps of a het job's script: {set = {offset = true}, top, ls, le}
-- for each step naming two or more components ([ls, le]: the command, continuation lines too).
local function het_steps(det)
  local out = {}
  local doc = det.docs[1]
  if doc == nil or not det.script_doc then return out end
  local s = doc.s
  for _, word in ipairs({"het-group", "pack-group"}) do
    local p = 1
    for _ = 1, 64 do
      local h = find(s, word, p, true)
      if h == nil or h > doc.n then break end
      p = h + #word
      local list = match(s, "^[= \t]+([%d,%-]+)", p)
      if list and sub(s, h - 2, h - 1) == "--" and not in_comment(doc, h) then
        local set, count, top = {}, 0, -1
        for item in string.gmatch(list, "[^,]+") do
          local a, z = match(item, "^(%d+)%-(%d+)$")
          if a == nil then a = match(item, "^(%d+)$"); z = a end
          if a and #a <= 3 and #z <= 3 then
            for k = tonumber(a), math.min(tonumber(z), tonumber(a) + 64) do
              if not set[k] then set[k] = true; count = count + 1 end
              if k > top then top = k end
            end
          end
          if count > 64 then break end
        end
        if count >= 2 then
          local ls = h
          for _ = 1, 65536 do
            if ls <= 1 or byte(s, ls - 1) == 10 then break end
            ls = ls - 1
          end
          local le = h
          for _ = 1, 64 do
            local nl = find(s, "\n", le, true)
            if nl == nil then le = #s; break end
            local q = nl - 1
            if byte(s, q) == 13 then q = q - 1 end
            le = nl
            if byte(s, q) ~= 92 then break end
            le = nl + 1
          end
          out[#out + 1] = {set = set, top = top, ls = ls, le = le, text = list}
        end
      end
    end
  end
  return out
end

-- Rule het-step. A het job's srun --het-group=0,1 step runs over several components: judged once
-- the last component it names is submitted, on their nodes together (GPUs per node: the
-- smallest), with the flags on that srun command only.
local function judge_het_steps(v, ctx, names, parts)
  local job, det, topo, seen = ctx.job, ctx.det, ctx.topo, ctx.seen
  local comps = job.het_components
  if type(comps) ~= "table" or job.het_offset == nil then return end
  local steps = het_steps(det)
  for si = 1, #steps do
    local st = steps[si]
    if st.top == job.het_offset then
      local nodes, gpn, ok = 0, nil, true
      for k = 0, st.top do
        if st.set[k] then
          local c = comps[k]
          local cp = c and parts[partitions_of(c, topo)[1] or ""]
          if type(cp) ~= "table" then ok = false; break end
          local g = gpu_shape(c, cp)
          local per = g.per_node
          if per == nil then ok = false; break end
          if per > cp.gpus then per = cp.gpus end
          nodes = nodes + job_nodes(c, cp, g, cp.gpus).min
          if gpn == nil or per < gpn then gpn = per end
        end
      end
      local sdet = ok and det_subset(det, function(e)
        return e.rec.doc == det.docs[1] and e.rec.pos >= st.ls and e.rec.pos <= st.le
      end)
      if ok and gpn and sdet.values.tp then
        local hjob = setmetatable({nodes_min = nodes, nodes_max = nodes, gpus_per_node = gpn, num_tasks = false,
          ntasks_per_node = false, req_nodes = false, min_cpus = false, cpus_per_task = false, bitflags = false},
          {__index = job})
        local hctx = {job = hjob, det = sdet, layouts = {}, topo = topo, shapes = {}}
        local suffix = format(" (het step: srun --het-group=%s runs on %s with %s each)", clean(st.text, 24),
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
end

return {judge_het_steps = judge_het_steps}
