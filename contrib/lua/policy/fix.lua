-- fix: the words of a rejection: the partition label, where the TP was seen, and the fix in
-- the launcher's own flags (never more GPUs, nodes or a larger --segment than the job has).

local import = ...
local format = string.format
local floor = math.floor
local clean, line_number, plural = import("util", "clean", "line_number", "plural")


-- Largest TP < tp that passes ok(t) and divides TP x PP (so TP x PP can be kept), or the job's
-- ranks when TP x PP needs more than the job has. O(limit): only values up to fx.limit (the
-- node's GPUs or the NVLink domain) can pass, whatever TP the user wrote.
local function smaller_tp(tp, pp, ok, fx)
  local prod = tp * pp
  local total = fx and fx.total
  local capped = false
  if total and total >= 1 and prod > total then prod = total; capped = true end
  local t = tp - 1
  if fx and fx.limit and t > fx.limit then t = fx.limit end
  if t > prod then t = prod end
  while t >= 1 do
    if prod % t == 0 and ok(t) then return t, floor(prod / t), capped end -- an integer in Lua 5.3+ too
    t = t - 1
  end
  return 1, prod, capped
end

-- The fix in the launcher's own flags (one source for every message that suggests a layout).
local LAYOUT_FLAGS = {
  megatron = "--tensor-model-parallel-size %d --pipeline-model-parallel-size %d",
  deepspeed = "--tensor-model-parallel-size %d --pipeline-model-parallel-size %d",
  nemo = "model.tensor_model_parallel_size=%d model.pipeline_model_parallel_size=%d",
  vllm = "--tensor-parallel-size %d --pipeline-parallel-size %d",
  sglang = "--tp-size %d --pp-size %d",
  torchtitan = "--parallelism.tensor_parallel_degree %d --parallelism.pipeline_parallel_degree %d",
}

local function tp_fix(tp, pp, ok, fx)
  local t, newpp, capped = smaller_tp(tp, pp, ok, fx)
  local text
  if capped then
    text = format("use TP=%d and PP=%d (TP x PP = %d, all the job's ranks)", t, newpp, t * newpp)
  else
    text = format("use TP=%d and PP=%d (TP x PP stays %d)", t, newpp, t * newpp)
  end
  local flags = fx and fx.launcher and LAYOUT_FLAGS[fx.launcher]
  if flags then text = text .. ", i.e. " .. format(flags, t, newpp) end
  return text
end

local function domain_words(part)
  if part.link == "pcie" then
    return "PCIe only, no NVLink"
  end
  if part.domain_nodes and part.domain_nodes > 1 then
    return format("NVLink domain of %d GPUs = %s", part.domain, plural(part.domain_nodes, "node"))
  end
  return format("NVLink domain of %d GPUs", part.domain)
end

local function where_text(det, L)
  local rec = det.tp_best
  if det.source == "stamp" then return " (from the slurmgpu stamp line)" end
  if det.source == "env" then return " (from SLURMGPU_TP in the job environment)" end
  if rec == nil then return "" end
  local d = rec.doc
  local value = rec.value or L.tp
  local ln = (d == det.docs[1] and det.script_doc) and line_number(d.s, rec.pos)
  if ln then
    return format(" (script line %d: %s %s)", ln, clean(rec.name, 48), tostring(value))
  end
  return format(" (%s %s)", clean(rec.name, 48), tostring(value))
end

local GROUP_WORDS = {tp = "tensor-parallel", cp = "context-parallel", ep = "expert-parallel"}

-- "t divides u", for tp_fix (a closure only where a fix is written).
local function divides(u) return function(t) return u % t == 0 end end

-- What a fix may suggest (tp_fix), made when a fix is written.
local function fx_of(ctx)
  local fx = ctx.fx
  if fx == nil then
    fx = {launcher = ctx.det.launcher, limit = ctx.fx_limit, total = ctx.fx_total}
    ctx.fx = fx
  end
  return fx
end

-- A finding of the rules {sev, rule, text, mode, repair} added to out.
local function add_finding(out, sev, rule, text, gmode, repair)
  out[#out + 1] = {sev = sev, rule = rule, text = "slurmgpu: " .. text, mode = gmode, repair = repair}
end

-- "partition 'gpu' (8 GPUs per node, ...)" and "(script line 12: --tp 16)" for the partition
-- check_partition is judging (ctx.cp_*), made on first use.
local function label_of(ctx)
  local l = ctx.cp_label
  if l == nil then
    local part = ctx.cp_part
    l = format("partition '%s' (%s per node, %s)", ctx.cp_pname, plural(part.gpus, "GPU"), domain_words(part))
    ctx.cp_label = l
  end
  return l
end

local function where_of(ctx)
  local w = ctx.cp_where
  if w == nil then
    w = where_text(ctx.det, ctx.cp_L)
    ctx.cp_where = w
  end
  return w
end

return {
  tp_fix = tp_fix, divides = divides, fx_of = fx_of, add_finding = add_finding, label_of = label_of,
  where_of = where_of, GROUP_WORDS = GROUP_WORDS,
}
