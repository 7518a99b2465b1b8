-- rules tp-exceeds-domain and tp-spans-nodes, for NVLink domains inside one node (and PCIe-only
-- nodes, whose domain is one GPU as the planner sees them). Consecutive ranks fill a node and TP
-- is the innermost dimension (Megatron, torchtitan), so a TP group stays on one node only when
-- TP divides the NVLink domain and the ranks per node.

local import = ...
local format = string.format
local floor = math.floor
local add_finding, divides, fx_of, label_of, tp_fix, where_of =
  import("fix", "add_finding", "divides", "fx_of", "label_of", "tp_fix", "where_of")
local clean, env_get, gcd, plural = import("util", "clean", "env_get", "gcd", "plural")
local dist_where, group_spans, launch_distribution, local_tasks, split_group =
  import("distribution", "dist_where", "group_spans", "launch_distribution", "local_tasks", "split_group")

-- Whether srun's task distribution splits TP groups over nodes (ranks are srun tasks: not when
-- each task starts its node's ranks itself, torchrun --nproc-per-node): why, or nil.
local function distribution_split(ctx, f)
  if f.rpn_how == "--nproc-per-node" or ctx.job.origin == "spank" then return nil end
  local d = ctx.dist
  if d == nil then
    d = launch_distribution(ctx.det, ctx.job)
    ctx.dist = d
  end
  local spans, how = group_spans(d, f.tp, f.nmin)
  if spans then return dist_where(ctx.det, d) .. " " .. how end
  return nil
end

local function tp_in_domain(ctx, f, out)
  local part, tp, L, rpn, nmin, hw, gpn = f.part, f.tp, f.L, f.rpn, f.nmin, f.hw, f.gpn
  -- the site's NVLink domain, as the planner uses it: 1 on PCIe-only nodes
  local d = part.domain
  if d == nil or d < 1 then d = hw end
  local unit = gcd(d, rpn)
  if part.link == "pcie" then
    add_finding(out, "reject", "tp-exceeds-domain", format(
      "TP=%d%s on %s: every tensor-parallel all-reduce of this %s-node job would run over PCIe, "
        .. "no faster than the network between nodes. Fix: %s.",
      tp, where_of(ctx), label_of(ctx), tostring(nmin), tp_fix(tp, L.pp, divides(unit), fx_of(ctx))))
  elseif tp > d or d % tp ~= 0 then
    local what
    if tp > d then
      what = format("TP=%d%s is larger than the NVLink domain", tp, where_of(ctx))
    else
      what = format("TP=%d%s does not divide the NVLink domain", tp, where_of(ctx))
    end
    local first = 0
    if tp <= d then first = floor(d / tp) * tp end
    local last = first + tp - 1
    if tp > rpn * nmin then
      add_finding(out, "reject", "tp-exceeds-domain", format(
        "%s on %s: one tensor-parallel group needs %d ranks, more than the %d of this %s-node job "
          .. "(%s per node). Fix: %s.",
        what, label_of(ctx), tp, rpn * nmin, tostring(nmin), plural(rpn, "rank"),
        tp_fix(tp, L.pp, divides(unit), fx_of(ctx))))
    else
      add_finding(out, "reject", "tp-exceeds-domain", format(
        "%s on %s: this %s-node job would run tensor-parallel ranks %d-%d across nodes %d-%d over the network. "
          .. "Fix: %s.",
        what, label_of(ctx), tostring(nmin), first, last, floor(first / rpn), floor(last / rpn),
        tp_fix(tp, L.pp, divides(unit), fx_of(ctx))))
    end
  elseif distribution_split(ctx, f) then
    local alt = ""
    if ctx.dist.kind == "plane" and rpn >= tp then alt = format(", or plane=%d (a multiple of TP)", rpn - rpn % tp) end
    add_finding(out, "reject", "tp-spans-nodes", format(
      "TP=%d%s spans nodes on %s: %s. Fix: srun --distribution=block (each node then holds %s)%s.",
      tp, where_of(ctx), label_of(ctx), distribution_split(ctx, f), plural(rpn, "consecutive rank"), alt))
  elseif rpn % tp ~= 0 then
    local first = 0
    if tp < rpn then first = floor(rpn / tp) * tp end
    local last = first + tp - 1
    local fix = tp_fix(tp, L.pp, divides(unit), fx_of(ctx))
    if rpn < (gpn or hw) and (gpn or hw) % tp == 0 then
      fix = format("start one rank per GPU (%d per node), or %s", gpn or hw, fix)
    end
    add_finding(out, "reject", "tp-spans-nodes", format(
      "TP=%d%s spans nodes on %s: with %s per node (%s) ranks %d-%d of one TP group land on nodes %d-%d. Fix: %s.",
      tp, where_of(ctx), label_of(ctx), plural(rpn, "rank"), f.rpn_how, first, last, floor(first / rpn),
      floor(last / rpn), fix))
  end
end

-- In a running step (SPANK): the step's real task layout. A TP group of consecutive task ids
-- must have all its tasks on this node; SLURM_GTIDS lists them (block, cyclic, plane, a
-- hostfile, a het step over several components alike), so no node count or distribution is
-- assumed. Runs whatever the step's node count says (a het step reports its component's), when
-- the node runs two or more tasks (ranks are tasks; one task per node starts its ranks itself).
local function step_layout(ctx, f, out)
  if ctx.job.origin ~= "spank" or f.tp <= 1 or f.rpn_how == "--nproc-per-node" then return end
  local set, n = local_tasks(ctx.job.env)
  -- one task per node starts its node's ranks itself (torchrun, a launcher script): contiguous
  if set == nil or n < 2 then return end
  local first = split_group(set, f.tp)
  if first == nil then return end
  local dist = env_get(ctx.job.env, "SLURM_DISTRIBUTION")
  local how, fix = "", ""
  if dist and #dist <= 64 then
    how = format(", placed by SLURM_DISTRIBUTION=%s", clean(dist, 32))
  else
    fix = ", or " .. tp_fix(f.tp, f.L.pp, divides(n), fx_of(ctx))
  end
  add_finding(out, "reject", "tp-spans-nodes", format(
    "TP=%d%s spans nodes: ranks %d-%d of one TP group are not all on this node, which runs %s of this step "
      .. "(its task layout, SLURM_GTIDS%s). Fix: srun --distribution=block with a multiple of %d tasks on each "
      .. "node%s.",
    f.tp, where_of(ctx), first, first + f.tp - 1, plural(n, "task"), how, f.tp, fix))
end

return {tp_in_domain = tp_in_domain, step_layout = step_layout}
