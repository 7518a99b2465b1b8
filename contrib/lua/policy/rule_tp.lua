-- rules tp-exceeds-domain and tp-spans-nodes, for NVLink domains inside one node (and PCIe-only
-- nodes, whose domain is one GPU as the planner sees them). Consecutive ranks fill a node and TP
-- is the innermost dimension (Megatron, torchtitan), so a TP group stays on one node only when
-- TP divides the NVLink domain and the ranks per node.

local import = ...
local format = string.format
local floor = math.floor
local add_finding, divides, fx_of, label_of, tp_fix, where_of =
  import("fix", "add_finding", "divides", "fx_of", "label_of", "tp_fix", "where_of")
local gcd, plural = import("util", "gcd", "plural")

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

return {tp_in_domain = tp_in_domain}
