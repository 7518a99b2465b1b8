-- budget: the work budget of one call. Every scan step is paid from it in units of about
-- one byte examined by a plain find; past WORK_MAX the scan stops, says why (det.limit) and a
-- multi-node job cannot be cleared (rule scan-truncated).



-- The work budget of one call, in units of about one byte examined by a plain find (~5 ns when
-- the byte equals the needle's first; a keyword hit costs HIT_COST, one that fails the first test
-- MISS_COST). Calibrated with bench/filter_bench.py so the worst input of 4 MB is decided in under
-- 5 ms: past it the scan stops, says so, and a multi-node job cannot be cleared.
local WORK_MAX = 600000
local HIT_COST = 2560
local MISS_COST = 64

-- Units per byte of every chunk after the first: a byte may stop every needle that starts with
-- it (4 MB of '-': ~12 ns a byte for the three '-' needles), so a long script of such bytes would
-- otherwise spend the whole budget close to the 5 ms bound. Typical scripts fit the first chunk
-- and are unaffected; a data here-document's body costs 1/8 of this (scan.lua).
local LATER_CHUNK_COST = 3
local DIGIT_COST = 160 -- per non-ASCII digit decoded (UTF-8 and a search of the digit blocks)

-- The work budget (see WORK_MAX): false once spent; the first limit hit is remembered for the
-- message ("what", at byte "at") and the log.
local function spend(det, units, what, at)
  det.work = det.work + units
  if det.work <= WORK_MAX then return true end
  if not det.limit then det.limit = what or "work budget"; det.limit_at = at end
  det.truncated = true
  return false
end

local function limit_hit(det, what, at)
  if not det.limit then det.limit = what; det.limit_at = at end
  det.truncated = true
end

-- One lexer step (a quote, escape or '#' looked at, here or in prints_only) paid from det's work
-- budget: a line dense with \" costs a step per two bytes, far more than its length. units: the
-- step's cost when it is not LEX_STEP (shell.lua's lexer). False once the budget is spent (the
-- scan then stops and says so).
local LEX_STEP = 64
local function lex_step(det, at, units)
  if det == nil then return true end
  local w = det.work + (units or LEX_STEP)
  det.work = w
  if w > WORK_MAX then spend(det, 0, "work budget (comment lexing)", at); return false end
  return true
end

-- A search of a whole text for a word of several bytes (a launcher name, a variable, a file
-- name, a here-document's delimiter) costs up to ~4 ns a byte: a plain find stops at every byte
-- equal to the word's first, and the text may be nothing else. Such searches go through
-- each_find, which pays FIND_BYTE_COST units for every byte the finds pass (so a unit stays near
-- 2 ns whatever the text) and FIND_HIT_COST for every occurrence handed back, and searches only
-- as far as the budget reaches.
local FIND_BYTE_COST = 2
local FIND_HIT_COST = 128

-- Every occurrence of word in s[a, b], in order, at most max of them: visit(h) for each; a true
-- result stops the search and is returned. "budget" when the budget ran out before b (the limit
-- is recorded as what), nil when the search reached b or max. cost: units a byte passed,
-- FIND_BYTE_COST unless a flood of the word's first byte costs less (two equal bytes: "<<").
local floor = math.floor
local find, sub = string.find, string.sub
local function each_find(det, s, word, a, b, what, max, visit, cost)
  if det == nil then det = {work = 0} end -- (no budget to pay from: a caller outside a detection)
  cost = cost or FIND_BYTE_COST
  if b > #s then b = #s end
  local short = false
  local reach = floor((WORK_MAX - det.work) / cost)
  if b - a + 1 > reach then b, short = a + reach - 1, true end
  local to_end = true -- the search passed the whole window (not stopped by max)
  if b - a + 1 >= #word then
    -- one copy of the window when it ends before the text does (a find cannot be told where to stop)
    local w, off = s, 0
    if b < #s then w, off = sub(s, a, b), a - 1 end
    local p = a - off
    to_end = false
    for _ = 1, max do
      local h = find(w, word, p, true)
      if h == nil then -- passed the rest of the window
        det.work = det.work + cost * (#w - p + 1)
        to_end = true
        break
      end
      det.work = det.work + cost * (h - p + 1) + FIND_HIT_COST
      p = h + 1
      local r = visit(h + off)
      if r then return r end
      if det.work > WORK_MAX then short, to_end = true, true; break end
    end
  end
  if short and to_end then
    limit_hit(det, what, a)
    return "budget"
  end
  return nil
end

return {
  WORK_MAX = WORK_MAX, HIT_COST = HIT_COST, MISS_COST = MISS_COST, LATER_CHUNK_COST = LATER_CHUNK_COST,
  DIGIT_COST = DIGIT_COST, FIND_BYTE_COST = FIND_BYTE_COST, spend = spend, limit_hit = limit_hit,
  lex_step = lex_step, each_find = each_find,
}
