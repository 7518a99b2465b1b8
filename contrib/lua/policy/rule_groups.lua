-- rules tp-/cp-/ep-exceeds-domain and tp-/cp-/ep-needs-segment, on NVLink domains of several
-- nodes (GB200/GB300 NVL72: 72 GPUs over 18 trays of 4).

local import = ...
local format = string.format
local floor = math.floor
local segment_of = import("detect", "segment_of")
local GROUP_WORDS, add_finding, divides, fx_of, label_of, tp_fix, where_of =
  import("fix", "GROUP_WORDS", "add_finding", "divides", "fx_of", "label_of", "tp_fix", "where_of")
local group_mode = import("modes", "group_mode")
local gcd, plural = import("util", "gcd", "plural")


-- A multi-node NVLink domain (GB200 NVL72): every TP, CP and EP group must stay inside one
-- domain, i.e. one --segment; PP and DP may cross racks. The spans are plan/placement.py's:
-- TP groups are blocks of tp ranks, CP groups of tp*cp, EP groups (Megatron's expert mesh,
-- expert TP = TP; torchtitan alike) of tp*ep; a block needs block / gcd(block, rpn) nodes.
local function domain_groups(ctx, f, out)
  local L, rpn, nmin, dn = f.L, f.rpn, f.nmin, f.dn
  local dom, seg, tp = f.part.domain, segment_of(ctx.det, ctx.job), L.tp
  local ok_node = divides(rpn)
  if tp > dom then
    add_finding(out, "reject", "tp-exceeds-domain", format(
      "TP=%d%s is larger than the NVLink domain on %s. Fix: %s.",
      tp, where_of(ctx), label_of(ctx),
      tp_fix(tp, L.pp, function(t) return t <= dom and (t % rpn == 0 or rpn % t == 0) end, fx_of(ctx))))
    return
  end
  local list = {{"tp", tp, tp}, {"cp", L.cp, tp * L.cp}, {"ep", L.ep, tp * L.ep}}
  local unit, need = 1, {}
  for i = 1, #list do
    local kind, size, block = list[i][1], list[i][2], list[i][3]
    if size > 1 then
      local u = floor(block / gcd(block, rpn)) -- '/' gives a float ("4.0") in Lua 5.3+
      unit = floor(unit * u / gcd(unit, u))
      if u > 1 then need[#need + 1] = {kind = kind, size = size, block = block, unit = u} end
    end
  end
  -- the smallest segment of whole groups that fits one domain and cuts the job evenly
  local K
  local k = unit
  while k <= dn do
    if nmin <= k or nmin % k == 0 then K = k; break end
    k = k + unit
  end
  if K and K > nmin then K = nmin end -- a segment is never larger than the job
  for i = 1, #need do
    local n = need[i]
    local gm = group_mode(ctx.topo, n.kind)
    local name = n.kind == "tp" and format("TP=%d%s", tp, where_of(ctx))
      or format("%s=%d (%s groups of %d ranks with TP=%d)", string.upper(n.kind), n.size, GROUP_WORDS[n.kind],
                n.block, tp)
    if n.block > dom then
      add_finding(out, "reject", n.kind .. "-exceeds-domain", format(
        "%s spans %s, more than the NVLink domain on %s: its collectives would run over the network. "
          .. "Fix: keep %s x TP at most %d GPUs.", name, plural(n.unit, "node"), label_of(ctx), string.upper(n.kind),
        dom), gm)
    elseif not (seg and seg >= 1 and seg <= dn and (nmin <= seg or seg % n.unit == 0)) then
      local fix
      if K then
        fix = format("add --segment=%d (each segment of %s is placed inside one NVLink domain)", K, plural(K, "node"))
        if n.kind == "tp" then fix = fix .. ", or " .. tp_fix(tp, L.pp, ok_node, fx_of(ctx)) end
      elseif n.kind == "tp" then
        fix = tp_fix(tp, L.pp, ok_node, fx_of(ctx))
      else
        fix = format("use a node count that is a multiple of %d (then --segment=%d)", unit, unit)
      end
      local why
      if seg then
        why = format("--segment=%d does not keep each %s group inside one domain", seg, string.upper(n.kind))
      else
        why = "the job does not ask to stay inside one NVLink domain (--segment)"
      end
      add_finding(out, "reject", n.kind .. "-needs-segment",
        format("%s spans nodes on %s and %s. Fix: %s.", name, label_of(ctx), why, fix),
          gm, (seg == nil) and K or nil)
    end
  end
end

return {domain_groups = domain_groups}
