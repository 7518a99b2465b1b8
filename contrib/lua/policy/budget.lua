-- budget: the work budget of one call. Every scan step is paid from it in units of about
-- one byte examined by a plain find; past WORK_MAX the scan stops, says why (det.limit) and a
-- multi-node job cannot be cleared (rule scan-truncated).



-- The work budget of one call, in units of about one byte examined by a plain find (~5 ns when
-- the byte equals the needle's first; a keyword hit costs HIT_COST, one that fails the first test
-- MISS_COST). Calibrated with bench/filter_bench.py so the worst input of 4 MB is decided in under
-- 5 ms: past it the scan stops, says so, and a multi-node job cannot be cleared.
local WORK_MAX = 700000
local HIT_COST = 2560
local MISS_COST = 64

-- Units per byte of every chunk after the first: a byte may stop a needle (~6 ns), so a long
-- script of such bytes would otherwise spend the whole budget at 1 unit per 6 ns, close to the
-- 5 ms bound on a loaded machine. Typical scripts fit the first chunk and are unaffected.
local LATER_CHUNK_COST = 2
local DIGIT_COST = 96 -- per non-ASCII digit decoded (UTF-8 and a search of the digit blocks)

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
-- budget: a line dense with \" costs a step per two bytes, far more than its length. False once
-- the budget is spent (the scan then stops and says so).
local LEX_STEP = 48
local function lex_step(det, at)
  if det == nil then return true end
  local w = det.work + LEX_STEP
  det.work = w
  if w > WORK_MAX then spend(det, 0, "work budget (comment lexing)", at); return false end
  return true
end

return {
  WORK_MAX = WORK_MAX, HIT_COST = HIT_COST, MISS_COST = MISS_COST, LATER_CHUNK_COST = LATER_CHUNK_COST,
  DIGIT_COST = DIGIT_COST, spend = spend, limit_hit = limit_hit, lex_step = lex_step,
}
