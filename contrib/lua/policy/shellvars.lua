-- shellvars: what a shell variable holds at a use: the script's assignments before it (the
-- last one, or every branch of an if/elif/else), the job environment, Slurm's variables that the
-- request fixes (markers resolved per partition), and arithmetic over them.

local import = ...
local find, sub, byte, format =
  string.find, string.sub, string.byte, string.format
local floor = math.floor
local HIT_COST, limit_hit, spend = import("budget", "HIT_COST", "limit_hit", "spend")
local in_comment = import("lexer", "in_comment")
local OPTCH = import("names", "OPTCH")
local env_get = import("util", "env_get")
local VALUE_MAX, read_digits, read_value, value_int =
  import("values", "VALUE_MAX", "read_digits", "read_value", "value_int")


local MAX_VARS = 256       -- distinct shell variables looked up per document

-- Shell assignments NAME=value (and the ${NAME:=value} default idiom) outside comments, in
-- order, in the scanned text; every lookup is paid from the work budget.
local function assignments(det, doc, name)
  doc.assign = doc.assign or {}
  local list = doc.assign[name]
  if list then return list end
  list = {}
  doc.assign[name] = list
  doc.nvars = (doc.nvars or 0) + 1
  if doc.nvars > MAX_VARS then
    limit_hit(det, format("more than %d shell variables to look up", MAX_VARS))
    list.unknown = true
    return list
  end
  local s, t = doc.s, doc.t
  local keys = {name .. "=", "{" .. name .. ":="}
  if doc.colon_eq == nil then -- whether the text has any ${NAME:=...} at all (one search, not one per name)
    spend(det, #t, "work budget (shell variable lookups)")
    doc.colon_eq = find(t, ":=", 1, true) ~= nil
  end
  for ki = 1, doc.colon_eq and 2 or 1 do
    local key, p = keys[ki], 1
    if not spend(det, #t, "work budget (shell variable lookups)") then list.unknown = true; return list end
    while true do
      local h = find(t, key, p, true)
      if h == nil then break end
      if not spend(det, HIT_COST, "work budget (shell variable lookups)") then list.unknown = true; return list end
      p = h + #key
      local pc = byte(s, h - 1)
      if ki == 2 then
        if pc == 36 and not in_comment(doc, h) then
          local v = read_value(s, h - 1)
          if v and v.k == "var" then list[#list + 1] = {pos = h, v = {k = "dflt", name = name, def = v.def}} end
        end
      elseif h == 1 or not (OPTCH[pc] or pc == 36 or pc == 123) then
        if not in_comment(doc, h) then
          local v = read_value(s, h + #key)
          if v then list[#list + 1] = {pos = h, v = v} end
        end
      end
    end
  end
  table.sort(list, function(a, b) return a.pos < b.pos end)
  return list
end

-- Slurm's variables that the request fixes at submit time: markers resolved per partition.
local SPECIAL = {SLURM_GPUS_ON_NODE = "gpn", SLURM_GPUS_PER_NODE = "gpn", SLURM_NNODES = "nodes",
                 SLURM_JOB_NUM_NODES = "nodes", SLURM_NTASKS_PER_NODE = "tpn"}

local function env_number(env, name)
  local e = env_get(env, name)
  if e == nil then return nil end
  local d, q = read_digits(e, 1)
  if d and q == #e + 1 then return value_int(d) end
  return false
end

-- Whether the text has a line starting (after blanks) with the shell keyword kw.
local function has_kw_line(text, kw)
  return find(text, "\n[ \t]*" .. kw .. "[ \t\r\n;]") ~= nil
end

-- The assignments (indices into list, from i down) of one if/elif/else chain that may reach a
-- use after list[i]: the sibling branches, and the value before the `if` when there is no `else`.
-- Bounded: 16 branches, 64 kB between two assignments, paid from the budget.
local function branch_chain(det, doc, list, i)
  local chain = {i}
  local j, seen_else = i, false
  while j > 1 and #chain < 16 do
    local a, b = list[j - 1].pos, list[j].pos
    if b - a > 65536 or not spend(det, b - a, "work budget (if/else branches)") then break end
    local between = sub(doc.s, a, b)
    if has_kw_line(between, "fi") then break end
    local is_else = has_kw_line(between, "else")
    if is_else or has_kw_line(between, "elif") then
      if is_else then seen_else = true end
      chain[#chain + 1] = j - 1
      j = j - 1
      if has_kw_line(between, "if") then break end
    elseif has_kw_line(between, "if") then
      if not seen_else then chain[#chain + 1] = j - 1 end -- no else: the value before the if reaches
      break
    else
      break
    end
  end
  return chain
end

-- Resolve a value to a number, the marker "gpn" (GPUs per node, known per partition) or an
-- arithmetic tree {e=...} whose variables are resolved (numbers or markers); nil if unknown.
local resolve
local function resolve_tree(det, doc, t, pos, env, depth)
  if t.n then return t end
  if t.var then
    if SPECIAL[t.var] then return {m = SPECIAL[t.var]} end
    local r = resolve(det, doc, {k = "var", name = t.var}, pos, env, depth + 1)
    if type(r) == "number" then return {n = r} end
    if r == "gpn" then return {m = "gpn"} end
    if type(r) == "table" then return r.e end
    return nil
  end
  local a = resolve_tree(det, doc, t.a, pos, env, depth)
  local b = a and resolve_tree(det, doc, t.b, pos, env, depth)
  if b == nil then return nil end
  return {op = t.op, a = a, b = b}
end

resolve = function(det, doc, v, pos, env, depth)
  if v == nil then return nil end
  if v.k == "num" then return v.n end
  if v.k == "word" then
    if v.w == "gpu" or v.w == "auto" then return "gpn" end
    return nil
  end
  if depth > 4 then return nil end
  if v.k == "expr" then
    local t = resolve_tree(det, doc, v.e, pos, env, depth)
    if t == nil then return nil end
    if t.n then return t.n end
    return {e = t}
  end
  if v.k == "dflt" then
    local e = env_number(env, v.name)
    if e then return e end
    if e == false then return nil end
    return v.def
  end
  if v.k ~= "var" then return nil end
  if SPECIAL[v.name] == "gpn" then return "gpn" end
  if SPECIAL[v.name] then return {e = {m = SPECIAL[v.name]}} end
  local list = assignments(det, doc, v.name)
  local best, bi
  for i = 1, #list do
    if list[i].pos < pos then best, bi = list[i], i end
  end
  if best then
    local chain = branch_chain(det, doc, list, bi)
    if #chain > 1 then
      -- if/elif/else: every branch's value may reach the use
      local alts = {}
      for i = 1, #chain do
        local r = resolve(det, doc, list[chain[i]].v, list[chain[i]].pos, env, depth + 1)
        if type(r) == "number" then alts[#alts + 1] = {n = r, pos = list[chain[i]].pos} end
      end
      if #alts > 1 then return {alt = alts} end
    end
    local r = resolve(det, doc, best.v, best.pos, env, depth + 1)
    if r ~= nil then return r end
  elseif list.unknown then
    return nil
  else
    local e = env_number(env, v.name)
    if e then return e end
    if e == false then return nil end
  end
  return v.def
end

-- A tree's value for one partition (ctx: gpn, nodes, tpn); nil if unknown or not a whole number.
local function eval_tree(t, ctx, depth)
  if depth > 32 then return nil end
  if t.n then return t.n end
  if t.m then return ctx[t.m] end
  local a = eval_tree(t.a, ctx, depth + 1)
  local b = a and eval_tree(t.b, ctx, depth + 1)
  if b == nil then return nil end
  local r
  if t.op == "+" then r = a + b
  elseif t.op == "-" then r = a - b
  elseif t.op == "*" then r = a * b
  elseif b == 0 then return nil
  elseif t.op == "/" then r = a / b; if r >= 0 then r = floor(r) else r = -floor(-r) end
  else r = math.fmod(a, b) end
  if r > VALUE_MAX then r = VALUE_MAX elseif r < -VALUE_MAX then r = -VALUE_MAX end
  return r
end

return {resolve = resolve, eval_tree = eval_tree, env_number = env_number}
