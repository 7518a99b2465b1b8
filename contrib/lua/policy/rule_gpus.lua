-- rules gpu-request-unreadable and gpus-per-node-unknown: TP groups can only be placed when the
-- GPUs per node are known. A GPU request the filter cannot read, or one that does not fix the
-- GPUs per node (--gpus=12 over 2 nodes can land as 8+4; --gpus-per-task without
-- --ntasks-per-node), is refused for a multi-node job with TP > 1.

local import = ...
local format = string.format
local add_finding, label_of, where_of = import("fix", "add_finding", "label_of", "where_of")
local clean = import("util", "clean")

-- gpu-request-unreadable: a reject for a multi-node TP job, else a warning.
local function gpu_request_unreadable(ctx, f, out)
  local g = f.g
  if not g.bad then return end
  if f.tp > 1 and f.multi then
    add_finding(out, "reject", "gpu-request-unreadable", format(
      "cannot read the GPU request '%s' (%s) of this multi-node job with TP=%d on %s. "
        .. "Fix: ask for GPUs per node, e.g. --gpus-per-node=%d.",
      clean(g.bad_text or "", 48), g.bad, f.tp, label_of(ctx), f.hw))
  else
    add_finding(out, "warn", "gpu-request-unreadable",
      format("cannot read the GPU request '%s' (%s).", clean(g.bad_text or "", 48), g.bad))
  end
end

-- gpus-per-node-unknown: the fix names a per-node request with the same GPUs where one exists.
local function gpus_per_node_unknown(ctx, f, out)
  local g, hw, nmin, tp = f.g, f.hw, f.nmin, f.tp
  if not (tp > 1 and f.multi and g.unknown) then return end
  local fix
  if g.total and g.total % hw == 0 then
    fix = format("--nodes=%d --gpus-per-node=%d", g.total / hw, hw)
  elseif g.total and g.total % nmin == 0 and (g.total / nmin) % tp == 0 and g.total / nmin <= hw then
    fix = format("--nodes=%d --gpus-per-node=%d", nmin, g.total / nmin)
  else
    fix = format("--nodes=%d --gpus-per-node=%d", nmin, hw)
  end
  add_finding(out, "reject", "gpus-per-node-unknown", format(
    "TP=%d%s on a multi-node job, but %s does not fix the GPUs per node: Slurm may place them unevenly "
      .. "(e.g. 8+4), so TP groups could straddle nodes on %s. Fix: ask for GPUs per node, e.g. %s.",
    tp, where_of(ctx), g.unknown, label_of(ctx), fix))
end

return {gpu_request_unreadable = gpu_request_unreadable, gpus_per_node_unknown = gpus_per_node_unknown}
