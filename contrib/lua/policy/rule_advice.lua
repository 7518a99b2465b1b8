-- Warnings: findings that never reject, each a rule of its own.
--   tp-branch-spans    one branch of an if/elif/else sets a TP that would span nodes
--   gpus-below-layout  the job gets fewer GPUs per node than the layout needs
--   world-mismatch     TP x PP x CP x DP does not match the GPUs the job gets
--   no-gpus            a TP job that asks for no GPUs
--   pcie-multinode     a multi-node job on PCIe-only nodes
--   nccl-env-missing   a multi-node job without the fabric's NCCL settings

local import = ...
local format = string.format
local concat = table.concat
local has_word = import("detect", "has_word")
local add_finding, label_of = import("fix", "add_finding", "label_of")
local env_get, line_number, plural = import("util", "env_get", "line_number", "plural")

local function tp_branch_spans(ctx, f, out)
  local det, part = ctx.det, f.part
  local br = det.branch_tp
  if br and f.multi and br.n > f.tp and (br.n > (part.domain or f.hw) or f.rpn % br.n ~= 0) then
    local ln = (br.doc == det.docs[1] and det.script_doc) and line_number(br.doc.s, br.pos)
    add_finding(out, "warn", "tp-branch-spans", format(
      "TP=%d, set %s in one branch of an if/elif/else, would span nodes on %s; the filter checks "
        .. "TP=%d, the smallest value the branches give (a job is refused when every branch spans).",
      br.n, ln and format("on script line %d", ln) or "by the script", label_of(ctx), f.tp))
  end
end

local function gpus_below_layout(ctx, f, out)
  local det, gpn = ctx.det, f.gpn
  local need, need_how
  if det.source == "stamp" and det.stamp.gpus_per_node then
    need, need_how = det.stamp.gpus_per_node, "the slurmgpu stamp"
  elseif f.rpn_how ~= "one rank per GPU" then
    need, need_how = f.rpn, f.rpn_how
  end
  if need and gpn and gpn < need and det.source ~= "none" then
    add_finding(out, "warn", "gpus-below-layout", format(
      "the layout needs %s per node (%s) but the job gets %d per node on partition '%s'.",
      plural(need, "GPU"), need_how, gpn, f.pname))
  end
end

local function world_mismatch(ctx, f, out)
  -- a het component's GPUs are part of the job's: its steps may span several (judged as het steps)
  if ctx.job.het_offset ~= nil then return end
  local L, total = f.L, nil
  if f.gpn then total = f.gpn * f.nmin elseif f.g.total then total = f.g.total end
  if ctx.det.source == "none" or not total or total <= 0 then return end
  local base = L.tp * L.pp * L.cp
  if L.dp then
    local world = base * L.dp
    if world ~= total then
      add_finding(out, "warn", "world-mismatch", format(
        "TP x PP x CP x DP = %dx%dx%dx%d = %d ranks, but the job has %s on partition '%s'.",
        L.tp, L.pp, L.cp, L.dp, world, plural(total, "GPU"), f.pname))
    end
  elseif total % base ~= 0 then
    add_finding(out, "warn", "world-mismatch", format(
      "the job's %s are not a multiple of TP x PP x CP = %dx%dx%d = %d on partition '%s'.",
      plural(total, "GPU"), L.tp, L.pp, L.cp, base, f.pname))
  end
end

local function no_gpus(_, f, out)
  if f.g.none and f.tp > 1 then
    add_finding(out, "warn", "no-gpus",
      format("TP=%d but the job asks for no GPUs on partition '%s'. Add --gpus-per-node=%d.", f.tp, f.pname, f.hw))
  end
end

local function pcie_multinode(_, f, out)
  if f.multi and f.part.link == "pcie" and not f.g.none then
    add_finding(out, "warn", "pcie-multinode", format(
      "partition '%s' has PCIe-only GPUs (no NVLink): a multi-node job there sends every collective over the "
        .. "network; prefer one node, or pipeline parallelism across nodes.",
      f.pname))
  end
end

-- NCCL settings live in the script or the environment: only checked when both are visible
-- (a batch script, or a task environment the caller marks complete, e.g. SPANK).
local function nccl_env_missing(ctx, f, out)
  local job, det, part = ctx.job, ctx.det, f.part
  if f.multi and not f.g.none and type(part.nccl) == "table" and (det.script_doc or job.env_complete) then
    local missing = {}
    for i = 1, #part.nccl do
      local var = part.nccl[i]
      -- (the script first: each name looked up in the job environment is a search of all of it in slurmctld)
      -- (a search the word budget stopped is no evidence that the script lacks it: not reported)
      if has_word(det, var, true) == false and env_get(job.env, var) == nil then missing[#missing + 1] = var end
    end
    if #missing > 0 then
      add_finding(out, "warn", "nccl-env-missing", format(
        "multi-node job on partition '%s' (%s) does not set %s; NCCL may pick the wrong network "
          .. "(set it in the script, or see 'slurmgpu site show').",
        f.pname, tostring(part.fabric), concat(missing, ", ")))
    end
  end
end

return {tp_branch_spans = tp_branch_spans, gpus_below_layout = gpus_below_layout, world_mismatch = world_mismatch,
  no_gpus = no_gpus, pcie_multinode = pcie_multinode, nccl_env_missing = nccl_env_missing}
