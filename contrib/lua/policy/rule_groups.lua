-- rules tp-/cp-/ep-exceeds-domain and tp-/cp-/ep-needs-segment, on NVLink domains of several
-- nodes (GB200/GB300 NVL72: 72 GPUs over 18 trays of 4).

local import = ...
local format = string.format
local floor = math.floor
local has_word, segment_of = import("detect", "has_word", "segment_of")
local GROUP_WORDS, add_finding, divides, fx_of, label_of, tp_fix, where_of =
  import("fix", "GROUP_WORDS", "add_finding", "divides", "fx_of", "label_of", "tp_fix", "where_of")
local group_mode = import("modes", "group_mode")
local gcd, plural = import("util", "gcd", "plural")


-- A multi-node NVLink domain (GB200 NVL72): every TP, CP and EP group must stay inside one
-- domain, i.e. one --segment; PP and DP may cross racks. The spans are plan/placement.py's:
-- TP groups are blocks of tp ranks, CP groups of tp*cp, EP groups (Megatron's expert mesh,
-- expert TP = TP; torchtitan alike) of tp*ep; a block needs block / gcd(block, rpn) nodes.
-- What the launch numbers its ranks by (plan/placement.py RANK_SOURCES): an explicit node rank
-- from SLURM_NODEID, torchrun's rendezvous (node ranks in host-name order), else srun's tasks.
local function rank_source(det)
  if has_word(det, "SLURM_NODEID") then return "nodeid" end
  if has_word(det, "torchrun") or has_word(det, "torch.distributed.run") then return "hostname" end
  return "procid"
end
local SOURCE_WORDS = {procid = "srun's task ranks", nodeid = "SLURM_NODEID",
                      hostname = "torchrun's rendezvous (host-name order)"}

-- rank-order: on a site whose host names interleave its NVLink blocks, a --segment keeps each
-- segment in one block, but a group's ranks stay in one segment only where the launch numbers
-- them in topology order (the site table says per rank source, from node_rank_order).
local function rank_order(ctx, out, n, name, gm)
  local follow = ctx.topo.ranks_follow_blocks
  if type(follow) ~= "table" then return end
  local src = rank_source(ctx.det)
  if follow[src] ~= false then return end
  add_finding(out, "reject", "rank-order", format(
    "%s spans %s on %s, whose host names interleave its NVLink blocks, and this launch numbers its ranks by "
      .. "%s, which follows the names (node_rank_order: %s): --segment keeps each segment inside one block, "
      .. "not the ranks of a group. Fix: %s.", name, plural(n.unit, "node"), label_of(ctx), SOURCE_WORDS[src],
    tostring(ctx.topo.node_rank_order),
    src == "procid" and "ask the admins for TopologyParam=BlockAsNodeRank, or use groups that fit one node"
      or "launch one task per GPU with srun (RANK=$SLURM_PROCID), which Slurm 26.05 numbers in topology order"),
    gm)
end

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
    elseif seg and seg >= 1 and seg <= dn and (nmin <= seg or seg % n.unit == 0) then
      if nmin > seg then rank_order(ctx, out, n, name, gm) end -- several segments: which holds which ranks?
    else
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
