-- commands: whether NAME=value is a command's environment prefix (TP=16 ./train.sh,
-- env TP=16 ..., bash -c "TP=16 ...") or words of a message (log "TP=16 was slower").

local import = ...
local find, sub, byte = string.find, string.sub, string.byte
local spend = import("budget", "spend")
local WORD_START = import("lexer", "WORD_START")


-- Words after which a NAME=value word may still start a command's environment (env TP=16 x).
local PREFIX_AFTER = {["then"] = true, ["do"] = true, ["else"] = true, ["elif"] = true, ["if"] = true,
                      ["while"] = true, ["until"] = true, ["!"] = true, ["time"] = true, ["env"] = true,
                      ["nohup"] = true, ["export"] = true, ["local"] = true, ["declare"] = true,
                      ["readonly"] = true, ["{"] = true}
local PREFIX_LOOKBACK = 512 -- bytes looked at before the word (past them: taken as a command start)
local PREFIX_WORD_COST = 512 -- work units per word walked back (a few finds, subs and reverses)

-- Whether the reversed text from pos on starts with blanks and then "c-" (reversed `-c`) that
-- is a word of its own: the quote before pos opens a command string, `bash -c "..."`.
local function after_dash_c(rev, pos)
  local _, e = find(rev, "^[ \t]*c%-", pos)
  if e == nil then return false end
  local c = byte(rev, e + 1)
  return c == nil or c == 32 or c == 9 or c == 10
end

-- Whether the word at ts may start a simple command: only NAME=value words between it and the
-- line start, an operator (; & | ( { `), a keyword such as then/env, or the quote of `bash -c "`.
-- Words of a message (`log "layout: TP=16 was slower"`, `echo "TP=16 ..."`) are not. Reads the
-- window before ts reversed, with anchored finds only (linear); paid from the work budget by the
-- bytes and words looked at (past it the word counts: the scan stops and says so).
local function command_start_walk(rev, windowed)
  local pos, n = 1, #rev
  for k = 1, 32 do
    local _, e = find(rev, "^[ \t]*", pos)
    pos = e + 1
    if pos > n then return true, k end -- the start of the text, or more than the window
    local c = byte(rev, pos)
    if c == 10 or c == 13 or c == 59 or c == 38 or c == 124 or c == 40 or c == 123 or c == 96 then
      return true, k
    end
    if c == 34 or c == 39 then return after_dash_c(rev, pos + 1), k end
    local _, we = find(rev, "^[^ \t\n]*", pos)
    if we >= n and windowed then return true, k end
    local w = string.reverse(sub(rev, pos, we))
    pos = we + 1
    local q = byte(w, 1)
    if q == 34 or q == 39 then -- the word opens a quoted string: its first word
      w = sub(w, 2)
      if not (PREFIX_AFTER[w] or find(w, "^[%a_][%w_]*=")) then return false, k end
      return after_dash_c(rev, pos), k
    end
    if find(w, "[\"']") then return true, k end -- X="a b" TP=16 ...: not read further
    if PREFIX_AFTER[w] then return true, k end
    if not find(w, "^[%a_][%w_]*=") then return false, k end
  end
  return true, 32
end

local function at_command_start(det, s, ts)
  local stop = ts - PREFIX_LOOKBACK
  if stop < 1 then stop = 1 end
  local ok, words = command_start_walk(string.reverse(sub(s, stop, ts - 1)), stop > 1)
  if not spend(det, ts - stop + words * PREFIX_WORD_COST, "work budget (environment prefixes)", ts) then
    return true
  end
  return ok
end

-- Whether the word at [ts, te] is a command's environment prefix: NAME=value at the start of a
-- word, followed by another word on the same line (TP=16 ./train.sh). In argv (a step's program
-- and its arguments, quotes already gone: bash -c MASTER_PORT=1 TP=16 ./x) no command start is
-- looked for.
local function env_prefix_end(det, s, ts, e, argv)
  local pc = byte(s, ts - 1)
  if not (pc == nil or pc == 10 or WORD_START[pc]) then return false end
  local _, b = find(s, "^[ \t]+", e)
  if b == nil then return false end
  local c = byte(s, b + 1)
  if c == nil or c == 10 or c == 13 or c == 35 or c == 59 or c == 38 or c == 124 then return false end
  return argv or at_command_start(det, s, ts)
end

return {env_prefix_end = env_prefix_end}
