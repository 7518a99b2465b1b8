-- partition: the job on one partition the site describes. First the facts the rules read (the
-- shape slurmctld will allocate, GPUs and ranks per node, the layout), then each rule in turn;
-- a rule adds findings {sev, rule, text} and never reads another rule's result.

local import = ...
local format = string.format
local layout_for, min_of = import("layout", "layout_for", "min_of")
local gpu_shape, job_nodes = import("shape", "gpu_shape", "job_nodes")
local plural, posnum = import("util", "plural", "posnum")
local rule_gpu_request_unreadable, rule_gpus_per_node_unknown =
  import("rule_gpus", "gpu_request_unreadable", "gpus_per_node_unknown")
local rule_tp_in_domain, rule_step_layout = import("rule_tp", "tp_in_domain", "step_layout")
local rule_domain_groups = import("rule_groups", "domain_groups")
local rule_scan_truncated = import("rule_scan", "scan_truncated")
local rule_external_gpu_job = import("rule_external", "external_gpu_job")
local rule_tp_branch_spans, rule_gpus_below_layout, rule_world_mismatch, rule_no_gpus, rule_pcie_multinode,
  rule_nccl_env_missing = import("rule_advice", "tp_branch_spans", "gpus_below_layout", "world_mismatch",
  "no_gpus", "pcie_multinode", "nccl_env_missing")
local rule_unbound_ranks = import("rule_binding", "unbound_ranks")

-- Ranks per node, the launcher's view: torchrun --nproc-per-node, srun --ntasks-per-node on
-- the launch line, the job's --ntasks-per-node, else one rank per GPU.
local function ranks_per_node(job, det, gpn, hw)
  local rpn, how = min_of(det.values.nproc, gpn or hw, det), "--nproc-per-node"
  if rpn == nil then
    local st = min_of(det.values.ntasks, gpn or hw, det)
    if st and st > 1 then rpn, how = st, "srun --ntasks-per-node" end
  end
  if rpn == nil then
    local jt = posnum(job.ntasks_per_node)
    if jt and jt > 1 then rpn, how = jt, "--ntasks-per-node" end
  end
  if rpn == nil then rpn, how = gpn or hw, "one rank per GPU" end
  if rpn < 1 then rpn = 1 end
  return rpn, how
end

-- The facts of the job on this partition (f): g (the GPU request), hw (the node's GPUs), gpn
-- (GPUs per node the job gets, nil if unknown), L (the layout), tp, nmin/nmax (nodes), multi
-- (may span nodes), rpn (ranks per node) and how it was found, dn (nodes per NVLink domain),
-- readable (multi-node with a known GPU count per node).
-- The job's nodes on this partition, from its fields alone: the GPU request g, the node's GPUs
-- hw, the GPUs per node the job gets (nil if unknown), the shape slurmctld will allocate, and
-- whether the job may span nodes (a --gpus total that does not fix the GPUs per node counts).
local function node_span(job, part)
  local g = gpu_shape(job, part)
  local hw = part.gpus
  local gpn = g.per_node
  if gpn and gpn > hw then gpn = hw end
  local shape = job_nodes(job, part, g, hw)
  local nmin, nmax = shape.min, shape.max
  local multi = nmin > 1 or (nmax ~= nil and nmax > 1)
  if g.total and not gpn and g.how == "--gpus" then
    if g.total <= hw and nmin == 1 and not multi then
      gpn = g.total
    elseif shape.explicit and g.total == nmin * hw then
      gpn = hw
    else
      g.unknown = format("--gpus=%d over %s", g.total, plural(nmin, "node"))
      multi = true
    end
  end
  return g, hw, gpn, shape, multi
end

local function facts(ctx, pname, part)
  local job, det = ctx.job, ctx.det
  local g, hw, gpn, shape, multi = node_span(job, part)
  local nmin, nmax = shape.min, shape.max
  local L = layout_for(det, gpn or hw)
  ctx.layouts[#ctx.layouts + 1] = L
  local sh = {partition = pname, nodes = nmin, nodes_max = nmax, nodes_how = shape.how}
  ctx.shapes[#ctx.shapes + 1] = sh
  local rpn, rpn_how = ranks_per_node(job, det, gpn, hw)
  -- what a fix may suggest: TP up to the node's GPUs (or the domain), TP x PP within the job's ranks
  ctx.fx, ctx.fx_limit, ctx.fx_total = nil, math.max(hw, part.domain or hw), multi and rpn * nmin or nil
  sh.gpus_per_node, sh.ranks_per_node, sh.ranks_how = gpn, rpn, rpn_how
  -- the words of messages, made when one is written (most jobs get none)
  ctx.cp_pname, ctx.cp_part, ctx.cp_L, ctx.cp_label, ctx.cp_where = pname, part, L, nil, nil
  return {g = g, hw = hw, gpn = gpn, L = L, tp = L.tp, nmin = nmin, nmax = nmax, multi = multi, rpn = rpn,
          rpn_how = rpn_how, dn = part.domain_nodes or 1, readable = multi and not g.unknown and not g.bad,
          part = part, pname = pname}
end

-- The rules for one partition, in the order their findings are reported. Returns the findings
-- and the layout checked.
local function check_partition(ctx, pname, part)
  local f, out = facts(ctx, pname, part), {}
  rule_gpu_request_unreadable(ctx, f, out)
  rule_gpus_per_node_unknown(ctx, f, out)
  rule_external_gpu_job(ctx, f, out)
  if f.readable and f.dn > 1 and (f.tp > 1 or f.L.cp > 1 or f.L.ep > 1) then
    rule_domain_groups(ctx, f, out) -- NVLink domains of several nodes (NVL72)
  elseif f.tp > 1 and f.readable and f.dn <= 1 then
    rule_tp_in_domain(ctx, f, out)
  end
  if #out == 0 then rule_step_layout(ctx, f, out) end -- a running step: its real task layout
  rule_tp_branch_spans(ctx, f, out)
  rule_scan_truncated(ctx, f, out)
  rule_gpus_below_layout(ctx, f, out)
  rule_world_mismatch(ctx, f, out)
  rule_no_gpus(ctx, f, out)
  rule_pcie_multinode(ctx, f, out)
  rule_nccl_env_missing(ctx, f, out)
  rule_unbound_ranks(ctx, f, out)
  return out, f.L
end

return {check_partition = check_partition, node_span = node_span}
