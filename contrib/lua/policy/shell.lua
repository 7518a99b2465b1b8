-- shell: the script as bash reads it across lines, for what one line alone cannot tell: a
-- quoted string that spans lines (a '#' at the start of a later line is then inside the string,
-- and the code after the closing quote runs), here-document bodies (what writes them, and
-- whether the file written is run later), and functions or aliases named echo/printf.
--
-- One pass from the start of the document, resumed where the last question left it and paid
-- from the work budget per quote, escape or '#' looked at (lex_step); past the budget the
-- answers fall back to the line-by-line view (and the scan itself stops and says so). Only
-- questions the line-by-line lexer cannot answer ask (a candidate flag in a comment or an echo
-- line; the here-documents of a script over 64 kB), so a typical script never runs it.

local import = ...
local find, sub, byte, match = string.find, string.sub, string.byte, string.match
local lex_step, spend = import("budget", "lex_step", "spend")

-- Where a word may begin: '#' starts a comment only there (bash: after a blank or an operator).
local WORD_START = {[32] = true, [9] = true, [10] = true, [59] = true, [38] = true, [124] = true, [40] = true,
                    [41] = true, [60] = true, [62] = true}

-- Whether a '#' at h starts a word. A backslash-newline before it joins it to the word before
-- the backslash: `--data-path=/x\` + newline + `# --tp 16` is one word `--data-path=/x#`.
local function word_start(s, h)
  if h == 1 then return true end
  local p = byte(s, h - 1)
  if p == 10 then
    local b = h - 2
    if byte(s, b) == 13 then b = b - 1 end
    if byte(s, b) == 92 and byte(s, b - 1) ~= 92 then -- a line continuation
      local q = byte(s, b - 1)
      return q == nil or WORD_START[q] == true
    end
    return true
  end
  return WORD_START[p] == true
end

-- The closing quote of a string opened at h ("..." or $'...' with backslash escapes, '...'
-- without), or nil when it never closes.
local function string_end(det, s, h, c)
  if c == 39 then return find(s, "'", h + 1, true) end
  local pat = c == 34 and '[\\"]' or (c == 96 and "[\\`]" or "[\\']")
  local j = c == 36 and h + 2 or h + 1
  local close = c == 36 and 39 or c
  while true do
    local e = find(s, pat, j)
    if e == nil then return nil end
    if not lex_step(det, h) then return nil end
    if byte(s, e) == 92 then j = e + 2
    elseif byte(s, e) == close then return e
    else j = e + 1 end
  end
end

-- Commands whose stdin is written to a file: the here-document is data unless the file runs.
local WRITERS = {cat = true, tee = true}
-- Words after which a file name runs (or is read as shell code).
local RUNS = {bash = true, sh = true, zsh = true, dash = true, ksh = true, source = true, ["."] = true, srun = true,
              exec = true, eval = true, python = true, python3 = true, env = true, nohup = true, time = true,
              xargs = true, sbatch = true, perl = true, ruby = true, node = true, torchrun = true, deepspeed = true,
              apptainer = true, singularity = true, chmod = true}

-- The file a here-document's command writes (`cat > F <<EOF`, `cat <<EOF >>F`, `tee F <<EOF`),
-- when that is all the line does with it; nil otherwise (bash, python, $(cat <<EOF), pipes).
local function written_file(line)
  local cmd = match(line, "^[ \t]*([%w_%.]+)")
  if not WRITERS[cmd] or find(line, "[|`]") or find(line, "$(", 1, true) then return nil end
  local f = match(line, ">>?[ \t]*([%w_%.%-/]+)")
  if cmd == "tee" and f == nil then f = match(line, "^[ \t]*tee[ \t]+([%w_%.%-/]+)") end
  return f
end

-- Whether the file name f runs after position p: it appears as a command or after a word that
-- runs it (bash f, srun ./f, source f, python f, chmod +x f). Bounded: 32 occurrences.
local function file_runs(det, s, f, p)
  local base = match(f, "([^/]+)$") or f
  local q = p
  for _ = 1, 32 do
    local h = find(s, base, q, true)
    if h == nil then return false end
    q = h + #base
    if not spend(det, 64, "work budget (here-documents)", h) then return true end
    local ls = h
    while ls > 1 and byte(s, ls - 1) ~= 10 and h - ls < 512 do ls = ls - 1 end
    local before = sub(s, ls, h - 1)
    local prev = match(before, "([%w_%.%+%-]*)[ \t]+[%./%w_%-]*$")
    if match(before, "^[ \t]*[%./%w_%-]*$") then return true end -- the file is the command
    if prev and (RUNS[prev] or prev == "+x" or prev == "-c") then return true end
  end
  return false
end

-- One lexer step at the special byte s[h]; returns where to go on.
local function lex_at(det, st, s, n, h)
  local c, regions = byte(s, h), st.regions
  if c == 92 then return h + 2 end
  if c == 39 or c == 34 or c == 96 or (c == 36 and byte(s, h + 1) == 39) then
    local e = string_end(det, s, h, c) or n
    if find(sub(s, h, e), "\n", 1, true) then regions[#regions + 1] = {a = h, b = e, kind = "string"} end
    return e + 1
  end
  if c == 35 then
    if not word_start(s, h) then return h + 1 end
    local nl = find(s, "\n", h, true)
    return (nl or n) + 1
  end
  if c ~= 60 or byte(s, h + 1) ~= 60 or byte(s, h + 2) == 60 or st.pending then return h + 1 end
  -- a here-document: its delimiter, then the body from the next line to the delimiter's line
  local strip, q = byte(s, h + 2) == 45, h + 2
  if strip then q = q + 1 end
  local _, e = find(s, "^[ \t]*", q)
  q = e + 1
  local delim, de = match(s, "^[\"']([^\"'\n]+)[\"']()", q)
  if not delim then delim, de = match(s, "^\\?([%a_][%w_%.%-]*)()", q) end -- not 1<<4
  local nl = delim and find(s, "\n", de, true)
  if not nl then return h + 2 end
  local ls = h
  while ls > 1 and byte(s, ls - 1) ~= 10 and h - ls < 4096 do ls = ls - 1 end
  local body_end, after, k = nil, n + 1, nl
  for _ = 1, 4096 do -- the delimiter alone on a line (after tabs for <<-)
    local t = find(s, delim, k + 1, true)
    if t == nil then break end
    local tail, head = byte(s, t + #delim), t - 1
    while strip and byte(s, head) == 9 do head = head - 1 end
    if byte(s, head) == 10 and (tail == nil or tail == 10 or tail == 13) then
      body_end, after = head, t + #delim
      break
    end
    k = t
  end
  local r = {a = nl + 1, b = body_end or n, kind = "heredoc", file = written_file(sub(s, ls, nl - 1))}
  regions[#regions + 1] = r
  -- the rest of the operator's line is code, lexed on (its quotes may matter); then the body is skipped
  st.pending, st.resume, st.line_end = r, after, nl
  return de
end

-- Lex doc.s up to position upto (or the end), recording strings that span lines and
-- here-document bodies in doc.sh.regions (in order). Resumes where the last call stopped.
local function lex(det, doc, upto)
  local st = doc.sh
  if st == nil then
    st = {pos = 1, regions = {}}
    doc.sh = st
  end
  local s, n = doc.s, doc.n
  if upto == nil or upto > n then upto = n end
  local i = st.pos
  while i <= upto and not st.broken do
    if not lex_step(det, i) then st.broken = true; break end
    local h = find(s, "[\\'\"#$<`]", i)
    if st.pending and (h == nil or h > st.line_end) then
      i = st.resume -- the here-document's operator line is done: on after its body
      st.pending = nil
    elseif h == nil or h > n then
      i = n + 1
    else
      i = lex_at(det, st, s, n, h)
    end
  end
  st.pos = i
  return st
end

-- The region (string spanning lines or here-document body) holding position p, or nil.
local function region_at(det, doc, p)
  local st = lex(det, doc, p)
  if st.broken and st.pos <= p then return nil end
  local r = st.regions
  local lo, hi = 1, #r
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local x = r[mid]
    if p < x.a then hi = mid - 1
    elseif p > x.b then lo = mid + 1
    else return x end
  end
  return nil
end

-- The here-document bodies of the whole document that are data: written to a file by cat/tee
-- and that file never run later (a data manifest, a YAML config), as {a, b} in order.
local function data_bodies(det, doc)
  if doc.data_bodies then return doc.data_bodies end
  local st = lex(det, doc, nil)
  local out = {}
  for i = 1, #st.regions do
    local x = st.regions[i]
    if x.kind == "heredoc" and x.file and not file_runs(det, doc.s, x.file, x.b) then
      out[#out + 1] = x
    end
  end
  doc.data_bodies = out
  return out
end

-- Whether the document defines a function or alias named echo or printf (then an echo line is
-- a command like any other). Searched once per document, when an echo line first matters.
local ECHO_DEFS = {"echo()", "echo ()", "function echo", "alias echo", "printf()", "printf ()", "function printf",
                   "alias printf"}
local function echo_redefined(det, doc)
  local r = doc.echo_def
  if r == nil then
    r = false
    spend(det, #doc.s, "work budget (echo definitions)")
    for i = 1, #ECHO_DEFS do
      if find(doc.s, ECHO_DEFS[i], 1, true) then r = true; break end
    end
    doc.echo_def = r
  end
  return r
end

return {WORD_START = WORD_START, word_start = word_start, region_at = region_at, data_bodies = data_bodies,
  echo_redefined = echo_redefined}
