-- values: reading one value as bash and Python read it: digits as int() reads them (any
-- Unicode Nd digits, '_' between digits), $VAR / ${VAR:-N}, $(( )) arithmetic (parsed into a
-- tree, evaluated per partition), launcher words (gpu, auto), or an unreadable value.

local import = ...
local find, sub, byte, match =
  string.find, string.sub, string.byte, string.match
local floor = math.floor
local concat = table.concat
local OPTCH = import("names", "OPTCH")


local VALUE_MAX = 65536    -- larger numbers are read as this (still far above any node's GPUs)

-- Unicode decimal digits (general category Nd), by the code point of each block's zero: Python's
-- int() reads them, so Megatron/vLLM run `--tensor-model-parallel-size １６` as TP=16.
-- (Python 3.11, Unicode 14.0; tests/test_policy_scan.py compares the table with unicodedata.)
local ND_ZEROS = {
  0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6, 0xE50,
  0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90, 0x1B50, 0x1BB0, 0x1C40,
  0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10, 0x104A0, 0x10D30, 0x11066,
  0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950,
  0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6,
  0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
}

-- The decimal digit encoded in UTF-8 at s[q] -> digit, next position; nil if none.
local function nd_digit(s, q)
  local c = byte(s, q)
  if c == nil then return nil end
  if c >= 48 and c <= 57 then return c - 48, q + 1 end
  if c < 0xC2 then return nil end
  local cp, len
  local c1, c2, c3 = byte(s, q + 1, q + 3)
  if c1 == nil or c1 < 0x80 or c1 > 0xBF then return nil end
  if c < 0xE0 then cp, len = (c - 0xC0) * 64 + (c1 - 0x80), 2
  else
    if c2 == nil or c2 < 0x80 or c2 > 0xBF then return nil end
    if c < 0xF0 then cp, len = ((c - 0xE0) * 64 + (c1 - 0x80)) * 64 + (c2 - 0x80), 3
    else
      if c3 == nil or c3 < 0x80 or c3 > 0xBF or c > 0xF4 then return nil end
      cp, len = (((c - 0xF0) * 64 + (c1 - 0x80)) * 64 + (c2 - 0x80)) * 64 + (c3 - 0x80), 4
    end
  end
  local lo, hi = 1, #ND_ZEROS -- the last block starting at or below cp
  if cp < ND_ZEROS[1] then return nil end
  while lo < hi do
    local mid = floor((lo + hi + 1) / 2)
    if ND_ZEROS[mid] <= cp then lo = mid else hi = mid - 1 end
  end
  local z = ND_ZEROS[lo]
  if cp <= z + 9 then return cp - z, q + len end
  return nil
end

-- Decimal digits as Python's int() reads them (any Nd digits, '_' between digits) -> the ASCII
-- digit string, the position after it and, when the slow path decoded UTF-8, how many digits it
-- decoded (the scan pays them from its budget); nil if s[q] starts no number. At most 16 digits.
local function read_digits(s, q)
  local d = match(s, "^(%d+)", q) -- the common case: ASCII only
  if d then
    local nb = byte(s, q + #d)
    if not (nb == 95 or (nb and nb >= 0xC2)) then return d, q + #d end
  elseif (byte(s, q) or 0) < 0xC2 then
    return nil
  end
  local out = {}
  local p = q
  for _ = 1, 16 do
    local digit, np = nd_digit(s, p)
    if digit == nil then
      if byte(s, p) == 95 and #out > 0 and nd_digit(s, p + 1) then p = p + 1
      else break end
    else
      out[#out + 1] = digit
      p = np
    end
  end
  if #out == 0 then return nil end
  return concat(out), p, #out
end

local function value_int(d)
  if d == nil then return nil end
  d = match(d, "^0*(%d+)$") or d
  if #d > 7 then return VALUE_MAX end
  local n = tonumber(d)
  if n > VALUE_MAX then n = VALUE_MAX end
  return n
end

-- Shell arithmetic $(( ... )): + - * / % and parentheses over literals and variables, parsed
-- into a tree {n=} | {var=} | {op=, a=, b=} (evaluated per partition, see eval_expr).
local function parse_arith(text)
  local toks = {}
  local i = 1
  for _ = 1, 64 do
    local _, e = find(text, "^[ \t]*", i)
    i = e + 1
    if i > #text then break end
    local d, np = read_digits(text, i)
    if d then toks[#toks + 1] = {n = value_int(d)}; i = np
    else
      local name, e2 = match(text, "^%$?{?([%a_][%w_]*)}?()", i)
      if name then toks[#toks + 1] = {var = name}; i = e2
      else
        local op = sub(text, i, i)
        if not find("+-*/%()", op, 1, true) then return nil end
        toks[#toks + 1] = {op = op}; i = i + 1
      end
    end
  end
  if i <= #text then return nil end
  local pos = 1
  local expr
  local function atom()
    local t = toks[pos]
    if t == nil then return nil end
    pos = pos + 1
    if t.n or t.var then return t end
    if t.op == "(" then
      local e = expr()
      if toks[pos] == nil or toks[pos].op ~= ")" then return nil end
      pos = pos + 1
      return e
    end
    if t.op == "-" or t.op == "+" then
      local a = atom()
      if a == nil then return nil end
      if t.op == "-" then return {op = "-", a = {n = 0}, b = a} end
      return a
    end
    return nil
  end
  local function term()
    local a = atom()
    while a and toks[pos] and (toks[pos].op == "*" or toks[pos].op == "/" or toks[pos].op == "%") do
      local op = toks[pos].op
      pos = pos + 1
      local b = atom()
      if b == nil then return nil end
      a = {op = op, a = a, b = b}
    end
    return a
  end
  expr = function()
    local a = term()
    while a and toks[pos] and (toks[pos].op == "+" or toks[pos].op == "-") do
      local op = toks[pos].op
      pos = pos + 1
      local b = term()
      if b == nil then return nil end
      a = {op = op, a = a, b = b}
    end
    return a
  end
  local tree = expr()
  if tree == nil or pos <= #toks then return nil end
  return tree
end

-- {k="num", n=n}, one table per number (values are never changed): fewer tables per flag read.
local NUM_MEMO_MAX = 256
local num_memo, num_memo_n = {}, 0
local function num_value(n)
  local v = num_memo[n]
  if v then return v end
  if num_memo_n >= NUM_MEMO_MAX then num_memo, num_memo_n = {}, 0 end
  v = {k = "num", n = n}
  num_memo[n], num_memo_n = v, num_memo_n + 1
  return v
end

-- A value -> v, end position. v: {k="num", n=16} | {k="var", name="TP", def=16} | {k="expr", e=tree}
-- | {k="word", w="gpu"} | {k="bad", text=...}
local function read_value(s, q)
  if q == nil or q > #s then return nil end
  local c = byte(s, q)
  if c == 34 or c == 39 then q = q + 1 end
  local d, e, decoded = read_digits(s, q)
  if d then
    local after = byte(s, e)
    if after == 34 or after == 39 then after = byte(s, e + 1) end
    if after == nil or not (OPTCH[after] and after ~= 45 and after ~= 43) then
      return num_value(value_int(d)), e, decoded
    end
    return nil, nil, decoded
  end
  if sub(s, q, q + 2) == "$((" then
    local body, depth, j, close = sub(s, q + 3, q + 259), 0, 1, nil
    for _ = 1, 64 do -- the "))" that closes at depth 0
      local h = find(body, "[()]", j)
      if h == nil then break end
      if byte(body, h) == 40 then depth = depth + 1
      elseif depth > 0 then depth = depth - 1
      elseif byte(body, h + 1) == 41 then close = h; break
      else break end
      j = h + 1
    end
    local tree = close and parse_arith(sub(body, 1, close - 1))
    if tree then return {k = "expr", e = tree}, q + 4 + close end
    return {k = "bad", text = sub(s, q, q + 23)}, q + 3
  end
  local name, after = match(s, "^%${([%a_][%w_]*):?[-=]()", q)
  if name then
    local dv, de = read_digits(s, after)
    if dv and byte(s, de) == 125 then return {k = "var", name = name, def = value_int(dv)}, de + 1 end
  end
  local e2
  name, e2 = match(s, "^%${([%a_][%w_]*)}()", q)
  if not name then name, e2 = match(s, "^%$([%a_][%w_]*)()", q) end
  if name then return {k = "var", name = name}, e2 end
  if match(s, "^%$[%(%{]", q) or c == 96 or byte(s, q) == 96 then
    return {k = "bad", text = sub(s, q, q + 23)}, q + 1
  end
  local w = match(s, "^(%a[%w%-_]*)", q)
  if w and #w <= 16 then return {k = "word", w = w}, q + #w end
  return nil
end

return {
  VALUE_MAX = VALUE_MAX, read_digits = read_digits, value_int = value_int, read_value = read_value,
}
