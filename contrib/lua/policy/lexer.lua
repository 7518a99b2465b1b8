-- lexer: documents (the script, the joined argv) and what bash makes of their lines: where a
-- line starts and ends, where a comment starts (quotes, $'...', escapes), and whether a line is
-- one echo/printf that only prints. Every byte looked at is paid from the work budget.

local import = ...
local find, sub, byte, match =
  string.find, string.sub, string.byte, string.match
local lex_step, spend = import("budget", "lex_step", "spend")
local WORD_START, echo_redefined, region_at, word_start =
  import("shell", "WORD_START", "echo_redefined", "region_at", "word_start")


local SCAN_MAX = 16777216  -- bytes of a script that are scanned (Slurm's own limit is 4 MB)

local CHUNK = 65536        -- the scan walks the text in chunks of this size (each find is bounded)

local function new_doc(s)
  local n = #s
  if n > SCAN_MAX then n = SCAN_MAX end
  return {s = s, t = s, n = n, scanned = 0, lines = {}, seen = {}, truncated = #s > SCAN_MAX}
end

-- Start of the line holding position p: the last newline in a window before p, the window
-- growing up to 64 kB (anchored greedy match: linear). A longer line starts "somewhere before".
-- Every byte copied is paid from the work budget.
local NEAR = 8 -- bytes walked back before any window: most hits sit near their line's start
local function line_start(doc, p)
  if p <= 1 then return 1 end
  local s, w = doc.s, 256
  local q0 = p > NEAR and p - NEAR or 1
  for q = p - 1, q0, -1 do
    if byte(s, q) == 10 then return q + 1 end
  end
  if q0 == 1 then return 1 end
  local cur = doc.cur
  if cur and p > cur.le and p - cur.le <= 4096 then
    -- just after the last line looked at (hits come in order): its newline, then any others
    local gap = sub(s, cur.le + 1, p - 1)
    if doc.det then spend(doc.det, #gap, "work budget (line lookups)", p) end
    local j, last = 1, nil
    while true do
      local nl = find(gap, "\n", j, true)
      if nl == nil then break end
      last, j = nl, nl + 1
    end
    if last then return cur.le + last + 1 end
  end
  while true do
    local a = p - w
    if a < 1 then a = 1 end
    if doc.det then spend(doc.det, p - a, "work budget (line lookups)", p) end
    local cut = match(sub(s, a, p - 1), "^.*()\n")
    if cut then return a + cut end
    if a == 1 then return 1 end
    if w >= 65536 then return a end
    w = w * 16
  end
end

-- End of the line holding position p (the same windows forward).
local function line_end(doc, p)
  local s, w = doc.s, 256
  if #s <= CHUNK then -- a small document: one search, at most its size
    local nl = find(s, "\n", p, true)
    if doc.det then spend(doc.det, (nl or #s) - p + 1, "work budget (line lookups)", p) end
    return nl and nl - 1 or #s
  end
  while true do
    local b = p + w
    if doc.det then spend(doc.det, w, "work budget (line lookups)", p) end
    local nl = find(sub(s, p, b), "\n", 1, true)
    if nl then return p + nl - 2 end
    if b >= #s then return #s end
    if w >= 65536 then return b end
    w = w * 16
  end
end


-- The first byte of the line [ls, le] that starts a comment, read as bash does: a small lexer
-- (unquoted, '...', "...", $'...', backslash escapes); '#' counts only at the start of a word.
-- A quote still open at the end of the line is taken as closed there (the line has no comment),
-- and so is a line whose lexing the budget stops.
local function comment_start(s, ls, le, det)
  if le - ls > 65536 then le = ls + 65536 end
  local line = sub(s, ls, le) -- searching s itself would run past the line: quadratic
  local i, n, lit = 1, #line, 0
  while i <= n do
    if not lex_step(det, ls) then return nil end
    local h = find(line, "[\\'\"#$]", i)
    if h == nil then return nil end
    local c = byte(line, h)
    if c == 35 then -- '#'
      if (h == 1 and word_start(s, ls)) or (h > 1 and WORD_START[byte(line, h - 1)] and lit ~= h - 1) then
        return ls + h - 1
      end
      i = h + 1
    elseif c == 92 then -- backslash: the next byte is literal (an escaped blank starts no word)
      lit = h + 1
      i = h + 2
    elseif c == 39 then -- '...': nothing is special inside
      local e = find(line, "'", h + 1, true)
      if e == nil then return nil end
      i = e + 1
    elseif c == 34 or (c == 36 and byte(line, h + 1) == 39) then -- "..." or $'...': \ escapes
      local close = c == 34 and '"' or "'"
      local pat = c == 34 and '[\\"]' or "[\\']"
      local j = c == 34 and h + 1 or h + 2
      while true do
        local e = find(line, pat, j)
        if e == nil then return nil end
        if not lex_step(det, ls) then return nil end
        if byte(line, e) == 92 then j = e + 2
        elseif sub(line, e, e) == close then i = e + 1; break
        else j = e + 1 end
      end
    else
      i = h + 1 -- a '$' that does not open $'...'
    end
  end
  return nil
end

-- The comment start of the line [ls, le] as bash reads the whole script: when the line begins
-- inside a string opened on an earlier line (shell.region_at), the string runs to its closing
-- quote and the line is lexed from there (`: "` + newline + `#" ; srun --tp 16` runs the srun).
-- Asked only when the line seems to hold a comment, so most lines never pay for it.
local function comment_across_lines(doc, ls, le, cs)
  if doc.argv or doc.det == nil or ls == 1 then return cs end
  local r = region_at(doc.det, doc, ls)
  if r == nil or r.kind ~= "string" or r.a >= ls then return cs end
  if r.b >= le then return false end
  return comment_start(doc.s, r.b + 1, le, doc.det) or false
end

-- Line facts for position p: start, end, comment start (cached per line start).
-- (lcs: the comment start the line alone shows, kept for in_line_comment)
local function line_at(doc, p)
  local ls = line_start(doc, p)
  local c = doc.lines[ls]
  if c == nil or p > c.le then
    local le = line_end(doc, p)
    if doc.det then spend(doc.det, le - ls + 1, "work budget (comment lexing)", p) end
    c = {ls = ls, le = le}
    doc.lines[ls] = c
  end
  return c
end

local function line_of(doc, p)
  local cur = doc.cur
  if cur and p >= cur.ls and p <= cur.le then return cur end
  local c = line_at(doc, p)
  if c.cs == nil then
    local cs = c.lcs
    if cs == nil then
      cs = comment_start(doc.s, c.ls, c.le, doc.det) or false
      c.lcs = cs
    end
    if cs then cs = comment_across_lines(doc, c.ls, c.le, cs) end
    c.cs = cs
  end
  doc.cur = c
  return c
end

-- An argument list (doc.argv) is no shell text: no comments, no lines.
local ARGV_LINE = {ls = 1, le = 1, cs = false, msg = false}
local function in_comment(doc, p)
  if doc.argv then return false, ARGV_LINE end
  local l = line_of(doc, p)
  return l.cs and p > l.cs, l
end

-- Whether p is in a comment as its line alone reads (no shell lexing of the lines before it):
-- for searches whose answer only words advice (a NCCL variable the script sets), so that they
-- never make the whole script be lexed. Cached per line start.
local function in_line_comment(doc, p)
  if doc.argv then return false end
  local c = line_at(doc, p)
  if c.cs ~= nil then return c.cs and p > c.cs end -- (the whole script's view, when known)
  if c.lcs == nil then c.lcs = comment_start(doc.s, c.ls, c.le, doc.det) or false end
  return c.lcs and p > c.lcs
end

-- Whether text after echo/printf only prints: nothing unquoted that pipes, chains, redirects to
-- a file (>&2 is fine) or runs a command ($( ) or `...`, also inside "..."). Unclosed quote: no.
local function prints_only(line, det, at)
  local i = 1
  while true do
    if not lex_step(det, at) then return false end
    local h = find(line, "[\\'\"|;&<>`$]", i)
    if h == nil then return true end
    local c = byte(line, h)
    if c == 92 then i = h + 2
    elseif c == 39 then
      local e = find(line, "'", h + 1, true)
      if e == nil then return false end
      i = e + 1
    elseif c == 34 then
      local j = h + 1
      while true do
        local e = find(line, '[\\"$`]', j)
        if e == nil then return false end
        if not lex_step(det, at) then return false end
        local d = byte(line, e)
        if d == 92 then j = e + 2
        elseif d == 34 then i = e + 1; break
        elseif d == 96 or byte(line, e + 1) == 40 then return false
        else j = e + 1 end
      end
    elseif c == 36 then
      if byte(line, h + 1) == 40 then return false end
      i = h + 1
    elseif c == 62 and find(line, "^>&[12]", h) then i = h + 3
    else return false end
  end
end

-- Whether the line l is one echo/printf command that only prints (its flags are message text:
-- `echo "note: --tensor-model-parallel-size 16 spans nodes"`). Not after a backslash line
-- continuation (then it is an argument), not printf -v (it assigns), never in argv (not shell
-- text: the step's program is judged on its arguments). Cached on the line.
local function message_line(doc, l)
  if doc.argv then return false end
  if l.msg ~= nil then return l.msg end
  local s, m = doc.s, false
  local _, e = find(s, "^[ \t]*", l.ls)
  local c1 = byte(s, e + 1)
  local w = (c1 == 101 or c1 == 112) and match(s, "^(%a+)[ \t]", e + 1) -- only echo/printf matter
  local stop = l.cs and (l.cs - 1) or l.le
  if (w == "echo" or w == "printf") and stop - e <= 4096 and not (l.ls > 2 and byte(s, l.ls - 2) == 92) then
    local line = sub(s, e + 1, stop)
    if doc.det then spend(doc.det, #line, "work budget (comment lexing)", l.ls) end
    m = not find(line, "^printf[ \t]+%-v") and prints_only(line, doc.det, l.ls)
    -- not a message after all: echo is a function or alias of the script, or the line begins
    -- inside a string opened earlier (the echo is text, the code after the quote runs)
    if m and doc.det and (echo_redefined(doc.det, doc) or (l.ls > 1 and region_at(doc.det, doc, l.ls))) then
      m = false
    end
  end
  l.msg = m
  return m
end

-- The logical command holding position p: from the start of its first line to the end of its
-- last (backslash-newline continuations followed both ways, at most 64 lines each way).
local function command_range(doc, p)
  local s = doc.s
  local l = line_of(doc, p)
  local a, b = l.ls, l.le
  for _ = 1, 64 do
    if a <= 2 then break end
    local e = a - 2
    if byte(s, e) == 13 then e = e - 1 end
    if byte(s, e) ~= 92 then break end
    a = line_of(doc, a - 1).ls
  end
  for _ = 1, 64 do
    local e = b
    if byte(s, e) == 13 then e = e - 1 end
    if byte(s, e) ~= 92 or b >= #s then break end
    b = line_of(doc, b + 1).le
  end
  return a, b
end

return {
  command_range = command_range,
  SCAN_MAX = SCAN_MAX, CHUNK = CHUNK, new_doc = new_doc, line_start = line_start, line_end = line_end,
  WORD_START = WORD_START, comment_start = comment_start, line_of = line_of, in_comment = in_comment,
  in_line_comment = in_line_comment,
  message_line = message_line,
}
