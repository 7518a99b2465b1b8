-- shellvars: what a shell variable holds at a use: the script's assignments before it (the
-- last one, or every branch of an if/elif/else), the job environment, Slurm's variables that the
-- request fixes (markers resolved per partition), and arithmetic over them.

local import = ...
local find, sub, byte, match, gsub, format =
  string.find, string.sub, string.byte, string.match, string.gsub, string.format
local floor = math.floor
local concat = table.concat
local HIT_COST, each_find, limit_hit, spend = import("budget", "HIT_COST", "each_find", "limit_hit", "spend")
local in_comment = import("lexer", "in_comment")
local OPTCH = import("names", "OPTCH")
local env_get = import("util", "env_get")
local VALUE_MAX, parse_arith, py_int, read_value =
  import("values", "VALUE_MAX", "parse_arith", "py_int", "read_value")


local MAX_VARS = 256       -- distinct shell variables looked up per document

-- The searches for a variable's name (its assignments, its declare -i) pay one unit a byte, not
-- FIND_BYTE_COST: a script names a few variables and each is looked for through the whole text
-- (a 64 kB script with $TP, $PP and $NNODES: 200,000 units). A flood of a name's first byte
-- costs ~4.7 ns a byte, so their text is bounded apart: VAR_SEARCH_MAX bytes for all of a job's
-- (~1.1 ms at worst); past it a variable is not known (and the job's scan is incomplete).
local VAR_SEARCH_MAX = 229376
local function var_find(det, t, word, max, visit)
  local used = det.var_bytes or 0
  if used + #t > VAR_SEARCH_MAX then
    limit_hit(det, "work budget (shell variable lookups)")
    return "budget"
  end
  det.var_bytes = used + #t
  return each_find(det, t, word, 1, #t, "work budget (shell variable lookups)", max, visit, 1)
end
local arith_word

-- Commands whose NAME=value words are arithmetic: `let`, and `declare`/`typeset`/`local` with an
-- option that gives the integer attribute (-i, -gi, -ri, ...).
local function integer_prefix(prefix)
  if find(prefix, "^[ \t]*let[ \t]") then return true end
  local opts = match(prefix, "^[ \t]*[%a]+[ \t]+(%-%a+)[ \t]")
  local cmd = match(prefix, "^[ \t]*(%a+)")
  return opts ~= nil and find(opts, "i", 2, true) ~= nil
    and (cmd == "declare" or cmd == "typeset" or cmd == "local" or cmd == "readonly" or cmd == "export")
end

-- The word at q read as bash's arithmetic reads it (quotes removed): {k="expr", e=tree} or nil.
arith_word = function(s, q)
  local word = match(s, "^([^ \t\r\n;&|<>()]+)", q)
  if word == nil or #word > 256 then return nil end
  word = gsub(word, "[\"']", "")
  local tree = parse_arith(word)
  if tree then return {k = "expr", e = tree} end
  return nil
end

-- Shell assignments NAME=value (and the ${NAME:=value} default idiom) outside comments, in
-- order, in the scanned text. One search for the name (var_find) finds all three uses: NAME=,
-- ${NAME:=, and `declare -i NAME` (or typeset/local -i, let), after which bash evaluates every
-- assignment as arithmetic (TP=8*2 is 16), as does a `declare -i TP=8*2` itself. Each candidate
-- that passes the look at its neighbours pays HIT_COST.
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
  local s, t, nl = doc.s, doc.t, #name
  local int_at = nil -- the first `declare -i NAME` (the integer attribute from there on)
  local function integer_line(h) -- whether the command before h on its line gives the attribute
    local l = in_comment(doc, h) and nil or doc.cur
    return l ~= nil and h - l.ls <= 256 and integer_prefix(sub(s, l.ls, h - 1))
  end
  local r = var_find(det, t, name, 1e9, function(h)
    local pc, nc = byte(s, h - 1), byte(s, h + nl)
    if nc == 61 then -- NAME=
      if h == 1 or not (OPTCH[pc] or pc == 36 or pc == 123) then
        if not spend(det, HIT_COST, "work budget (shell variable lookups)") then return "budget" end
        if not in_comment(doc, h) then
          local v
          if (int_at and int_at < h) or integer_line(h) then v = arith_word(s, h + nl + 1) end
          v = v or read_value(s, h + nl + 1)
          if v then list[#list + 1] = {pos = h, v = v} end
        end
      end
    elseif nc == 58 and pc == 123 and byte(s, h - 2) == 36 and byte(s, h + nl + 1) == 61 then -- ${NAME:=
      if not spend(det, HIT_COST, "work budget (shell variable lookups)") then return "budget" end
      if not in_comment(doc, h) then
        local v = read_value(s, h - 2)
        if v and v.k == "var" then list[#list + 1] = {pos = h, v = {k = "dflt", name = name, def = v.def}} end
      end
    elseif int_at == nil and (pc == 32 or pc == 9) and (nc == nil or nc == 32 or nc == 9 or nc == 10 or nc == 59) then
      if not spend(det, HIT_COST, "work budget (shell variable lookups)") then return "budget" end
      if integer_line(h) then int_at = h end -- declare -i NAME
    end
    return nil
  end)
  if r == "budget" then list.unknown = true; return list end
  return list
end

-- Slurm's variables that the request fixes at submit time: markers resolved per partition.
local SPECIAL = {SLURM_GPUS_ON_NODE = "gpn", SLURM_GPUS_PER_NODE = "gpn", SLURM_NNODES = "nodes",
                 SLURM_JOB_NUM_NODES = "nodes", SLURM_NTASKS_PER_NODE = "tpn"}

-- A number in the job environment as the command line gets it ($TP unquoted: blanks around it
-- are dropped) and int() reads it; false when the value is set but no number (a value over 64
-- bytes never is one: a 1 MB value costs nothing here).
local function env_number(env, name)
  local e = env_get(env, name)
  if e == nil then return nil end
  if #e > 64 then return false end
  return py_int(e) or false
end

-- Whether s[a, b] has a line starting (after blanks) with the shell keyword kw (not the line of
-- a itself). Plain finds of kw paid from the budget, then a look at the bytes around each.
local KW_END = {[32] = true, [9] = true, [13] = true, [10] = true, [59] = true}
local function has_kw_line(det, s, a, b, kw)
  return each_find(det, s, kw, a, b, "work budget (if/else branches)", 4096, function(h)
    if not KW_END[byte(s, h + #kw) or 0] then return nil end
    local i = h - 1
    while i > a and h - i <= 64 and (byte(s, i) == 32 or byte(s, i) == 9) do i = i - 1 end
    return (i > a and byte(s, i) == 10) or nil
  end) == true
end

-- The assignments (indices into list, from i down) of one if/elif/else chain that may reach a
-- use after list[i]: the sibling branches, and the value before the `if` when there is no `else`.
-- Bounded: 16 branches, 64 kB between two assignments, paid from the budget.
local function branch_chain(det, doc, list, i)
  local chain = {i}
  local j, seen_else = i, false
  while j > 1 and #chain < 16 do
    local a, b = list[j - 1].pos, list[j].pos
    if b - a > 65536 then break end
    local s = doc.s
    if has_kw_line(det, s, a, b, "fi") then break end
    local is_else = has_kw_line(det, s, a, b, "else")
    if is_else or has_kw_line(det, s, a, b, "elif") then
      if is_else then seen_else = true end
      chain[#chain + 1] = j - 1
      j = j - 1
      if has_kw_line(det, s, a, b, "if") then break end
    elseif has_kw_line(det, s, a, b, "if") then
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
local resolve, resolve_text
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

-- The text a value expands to (for a word of several parts, 1${X}6): numbers as digits, other
-- text as it is, variables from the script's last assignment before pos or the environment.
resolve_text = function(det, doc, v, pos, env, depth)
  if v == nil or depth > 4 then return nil end
  if v.k == "str" then return v.s end
  if v.k == "word" then return v.w end
  if v.k == "cat" then
    local out = {}
    for i = 1, #v.parts do
      local part = v.parts[i]
      out[i] = part.lit or resolve_text(det, doc, part, pos, env, depth + 1)
      if out[i] == nil then return nil end
    end
    return concat(out)
  end
  if v.k == "var" and not SPECIAL[v.name] then
    local list = assignments(det, doc, v.name)
    local best
    for i = 1, #list do
      if list[i].pos < pos then best = list[i] end
    end
    if best then return resolve_text(det, doc, best.v, best.pos, env, depth + 1) end
    if list.unknown then return nil end
    local e = env_get(env, v.name)
    if e ~= nil then return #e <= 256 and e or nil end
    if v.def then return tostring(v.def) end
    return ""
  end
  local r = resolve(det, doc, v, pos, env, depth + 1)
  if type(r) == "number" then return tostring(r) end
  return nil
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
  if v.k == "cat" then -- a word of several parts: joined as bash joins them, then read as int() reads it
    local text = resolve_text(det, doc, v, pos, env, depth)
    return text and (py_int(text)) or nil
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

return {resolve = resolve, resolve_text = resolve_text, eval_tree = eval_tree, env_number = env_number}
