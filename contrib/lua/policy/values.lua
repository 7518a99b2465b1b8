-- values: reading one value as bash and Python read it: digits as int() reads them (any
-- Unicode Nd digits, '_' between digits), $VAR / ${VAR:-N}, $(( )) arithmetic (parsed into a
-- tree, evaluated per partition), launcher words (gpu, auto), or an unreadable value.

local import = ...
local find, sub, byte, match =
  string.find, string.sub, string.byte, string.match
local floor = math.floor
local concat = table.concat
local OPTCH = import("names", "OPTCH")
local ceil_div = import("util", "ceil_div")


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

-- Parsed $(( )) bodies (the same expression repeats on many lines): a tree per text, and what
-- a new one costs the work budget (the scan charges it: read_value's third value). Bounded.
local ARITH_MEMO_MAX = 256
local ARITH_COST = 16 -- decoded-digit units (values.DIGIT_COST each) per byte of a new body
local arith_memo, arith_memo_n = {}, 0

-- $(( ... )) at s[q]: the arithmetic tree and the position after it, or a "bad" value; and the
-- cost of reading it (0 when the same text was parsed before).
local function read_arith(s, q)
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
  if close == nil then return {k = "bad", text = sub(s, q, q + 23)}, q + 3, 1 end
  local text = sub(body, 1, close - 1)
  local v = arith_memo[text]
  if v then return v, q + 4 + close, 0 end
  local tree = parse_arith(text)
  v = tree and {k = "expr", e = tree} or {k = "bad", text = sub(s, q, q + 23)}
  if arith_memo_n >= ARITH_MEMO_MAX then arith_memo, arith_memo_n = {}, 0 end
  arith_memo[text], arith_memo_n = v, arith_memo_n + 1
  return v, q + 4 + close, ceil_div(#text * ARITH_COST, 8)
end

-- A parameter expansion at s[q] ('$'): a variable {k="var", name, def}, an arithmetic value, a
-- "bad" value (command substitution, ${...} forms the filter does not evaluate), or nil when the
-- '$' is literal; and the position after it.
local function read_dollar(s, q)
  local c2 = byte(s, q + 1)
  if c2 == 40 then
    if byte(s, q + 2) == 40 then return read_arith(s, q) end -- (and its cost)
    return {k = "bad", text = sub(s, q, q + 23)}, q + 1
  end
  if c2 == 123 then
    local name, after = match(s, "^%${([%a_][%w_]*):?[-=]()", q)
    if name then
      local dv, de = read_digits(s, after)
      if dv and byte(s, de) == 125 then return {k = "var", name = name, def = value_int(dv)}, de + 1 end
      return {k = "bad", text = sub(s, q, q + 23)}, q + 1
    end
    local e2
    name, e2 = match(s, "^%${([%a_][%w_]*)}()", q)
    if name then return {k = "var", name = name}, e2 end
    return {k = "bad", text = sub(s, q, q + 23)}, q + 1
  end
  local name, e3 = match(s, "^%$([%a_][%w_]*)()", q)
  if name then return {k = "var", name = name}, e3 end
  return nil, q + 1
end

-- Python's int() on a string: blanks around it, an optional sign, digits as read_digits reads
-- them and nothing else; nil for anything else and for a negative number (no parallel size).
local function py_int(text)
  local a, sign = match(text, "^[ \t\r\n\f\v]*()([+-]?)")
  local d, e, decoded = read_digits(text, a + #sign)
  if d == nil or sign == "-" then return nil end
  if not find(text, "^[ \t\r\n\f\v]*$", e) then return nil end
  return value_int(d), decoded
end

-- Bytes that end an unquoted shell word.
local WORD_END = {[32] = true, [9] = true, [10] = true, [13] = true, [59] = true, [38] = true, [124] = true,
                  [60] = true, [62] = true, [40] = true, [41] = true}
local MAX_SEGMENTS = 16
local WORD_BYTES = 256

-- Whether the quote at s[i] closes a string the word sits in (`bash -c "... --tp 16"`) rather
-- than opening a part of the word: nothing of the word follows it.
local function closes_outer(s, i)
  local c = byte(s, i + 1)
  return c == nil or WORD_END[c] == true or c == 92
end

-- One shell word at s[q] as bash splits it, as segments: literal text {lit=}, parameter and
-- arithmetic expansions (values as read_dollar reads them); nil if the word has a part the
-- filter does not read (then `bad` holds that value). Bounded: MAX_SEGMENTS parts, WORD_BYTES.
local function read_word(s, q)
  local segs, i, stop, cost = {}, q, q + WORD_BYTES, 0
  local opened = byte(s, q) == 34 or byte(s, q) == 39 -- the word starts with its own quote
  while #segs < MAX_SEGMENTS and i <= stop do
    local c = byte(s, i)
    if c == nil or WORD_END[c] then break end
    if c == 92 then -- backslash: the next byte is literal; a line continuation ends the word
      local n = byte(s, i + 1)
      if n == nil or n == 10 or n == 13 then break end
      segs[#segs + 1] = {lit = sub(s, i + 1, i + 1)}
      i = i + 2
    elseif c == 39 then
      if i > q and not opened and closes_outer(s, i) then break end
      local e = find(s, "'", i + 1, true)
      if e == nil or e > stop then break end
      segs[#segs + 1] = {lit = sub(s, i + 1, e - 1)}
      i = e + 1
    elseif c == 34 then
      if i > q and not opened and closes_outer(s, i) then break end
      local j = i + 1
      while true do
        local h = find(s, '[\\"$`]', j)
        if h == nil or h > stop then return nil, nil, {k = "bad", text = sub(s, q, q + 23)} end
        if h > j then segs[#segs + 1] = {lit = sub(s, j, h - 1)} end
        local d = byte(s, h)
        if d == 34 then i = h + 1; break end
        if d == 96 then return nil, nil, {k = "bad", text = sub(s, q, q + 23)} end
        if d == 92 then
          segs[#segs + 1] = {lit = sub(s, h + 1, h + 1)}
          j = h + 2
        else
          local v, e, vc = read_dollar(s, h)
          cost = cost + (vc or 0)
          if v == nil then segs[#segs + 1] = {lit = "$"}
          elseif v.k == "bad" then return nil, nil, v, cost
          else segs[#segs + 1] = v end
          j = e
        end
        if #segs >= MAX_SEGMENTS then return nil, nil, {k = "bad", text = sub(s, q, q + 23)} end
      end
    elseif c == 36 then
      local v, e, c2 = read_dollar(s, i)
      cost = cost + (c2 or 0)
      if v == nil then segs[#segs + 1] = {lit = "$"}
      elseif v.k == "bad" then return nil, nil, v, cost
      else segs[#segs + 1] = v end
      i = e
    elseif c == 96 then
      return nil, nil, {k = "bad", text = sub(s, q, q + 23)}
    else
      local _, e = find(s, "^[^ \t\r\n;&|<>()'\"\\$`]+", i)
      segs[#segs + 1] = {lit = sub(s, i, e)}
      i = e + 1
    end
  end
  return segs, i, nil, cost
end

-- The value of a word's segments: one expansion as it is, literal text as int() reads it (or a
-- launcher word such as gpu), several parts as {k="cat", parts} (joined once the variables are
-- known, shellvars.resolve). Returns the value and how many non-ASCII digits were decoded.
local function word_value(segs)
  if #segs == 1 and segs[1].k then return segs[1] end
  local lits = {}
  for i = 1, #segs do
    if segs[i].k then return {k = "cat", parts = segs} end
    lits[i] = segs[i].lit
  end
  local text = concat(lits)
  local n, decoded = py_int(text)
  if n then return num_value(n), decoded end
  if #text <= 16 and match(text, "^%a[%w%-_]*$") then return {k = "word", w = text} end
  return {k = "str", s = text} -- text that is no number (8*2, 16,): a part of a longer word at most
end

-- A value -> v, end position, and its cost in decoded-digit units (non-ASCII digits decoded, the
-- bytes of a new $(( )) body): the scan pays it from the work budget. v: {k="num", n=16} |
-- {k="var", name="TP", def=16} | {k="expr", e=tree} | {k="cat", parts} | {k="word", w="gpu"} |
-- {k="str", s=text} (not a number, e.g. 8*2 or 16,: nothing to check, but a part of a longer word)
-- | {k="bad", text=...}.
-- A shell word is read as bash splits it and Python's int() reads it: "1""6", 1${X}6, +16 and
-- ' 16' are 16. `config` (a YAML/JSON key: value): the digits up to the first byte that cannot
-- continue a number, so `"autotp_size": 16}` is 16.
local function read_value(s, q, config)
  if q == nil or q > #s then return nil end
  local c = byte(s, q)
  if config then
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
  elseif c and c >= 48 and c <= 57 then -- the common case: ASCII digits that end the word
    local _, e = find(s, "^%d+", q)
    local nb = byte(s, e + 1)
    if nb == nil or WORD_END[nb] or ((nb == 34 or nb == 39) and closes_outer(s, e + 1)) then
      return num_value(value_int(sub(s, q, e))), e + 1
    end
  end
  local segs, e, bad, cost = read_word(s, q)
  if segs == nil then return bad, q + 1, cost end
  if #segs == 0 then return {k = "str", s = ""}, q end -- X= sets X to the empty string
  local v, decoded = word_value(segs)
  return v, e, (decoded or 0) + cost
end

return {
  VALUE_MAX = VALUE_MAX, read_digits = read_digits, value_int = value_int, read_value = read_value, py_int = py_int,
  parse_arith = parse_arith,
}
