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
local find, sub, byte, match, lower, reverse =
  string.find, string.sub, string.byte, string.match, string.lower, string.reverse
local each_find, lex_step, spend = import("budget", "each_find", "lex_step", "spend")
local floor = math.floor

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

-- The lexer searches a window of the text: [wa, wb], from where it stands to WINDOW bytes past
-- where it was asked to go (a byte the text lacks is then searched for up to there, not through
-- the whole 4 MB once per lexed question). Copying it costs a unit per 16 bytes.
local WINDOW = 65536
local function set_window(det, st, s, n, i, upto)
  local wb = (upto > i and upto or i) + WINDOW
  if wb > n then wb = n end
  st.wa, st.wb = i, wb
  st.w = (i == 1 and wb == n) and s or sub(s, i, wb)
  if det then spend(det, floor((wb - i) / 16), "work budget (comment lexing)", i) end
end

-- The next position >= i of the byte c (one of SPECIALS) in the window, remembered in the lexer
-- state st (the lexer only moves forward: each byte's searches pass the text once in all); nil
-- when there is none up to the window's end.
local function next_at(st, c, i)
  local at = st.nx[c]
  if at == false then return nil end
  if at and at >= i then return at end
  local from, seen = i, st.nl[c]
  if seen and seen >= from then from = seen + 1 end
  if from > st.wb then return nil end
  local h = find(st.w, c, from - st.wa + 1, true)
  if h then
    at = h + st.wa - 1
    st.nx[c] = at
    return at
  end
  if st.wb >= st.n then st.nx[c] = false else st.nx[c] = nil; st.nl[c] = st.wb end
  return nil
end

-- The closing quote of a string opened at h ("..." or $'...' with backslash escapes, '...'
-- without), or nil when it never closes (or not within 4 more windows): the next backslash
-- and the next quote (next_at).
local function string_end(det, st, s, h, c)
  local close = (c == 36 or c == 39) and "'" or (c == 96 and "`" or '"')
  local j = c == 36 and h + 2 or h + 1
  local more = 4
  while true do
    local e = next_at(st, close, j)
    if e == nil then
      if st.wb >= st.n or more == 0 then return nil end
      more = more - 1
      set_window(det, st, s, st.n, j, j)
    elseif c == 39 then
      return e
    else
      local bs = next_at(st, "\\", j)
      if bs == nil or bs > e then return e end
      if not lex_step(det, h) then return nil end
      j = bs + 2 -- an escaped byte: go on after it
    end
  end
end

-- Units of one step of this lexer (~1 us: the next of each special byte, then the step itself).
local SH_STEP = 512

-- The bytes the lexer stops at.
local SPECIALS = {"\\", "'", '"', "#", "$", "<", "`"}

-- The start of the line holding h, looked for at most NEAR bytes back (else h - NEAR: a
-- command that long is not read as one that writes a file). One reversed copy, one find.
local NEAR = 1024
local function line_start_near(s, h)
  local a = h > NEAR and h - NEAR or 1
  local r = find(reverse(sub(s, a, h - 1)), "\n", 1, true)
  return r and h - r + 1 or a
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

-- How the code of doc after position p uses the file name f: "runs" when it appears as a command
-- or after a word that runs it (bash f, srun ./f, source f, python f, chmod +x f), else "config"
-- when an option that names a config file takes it (--deepspeed_config f, --config=f,
-- --yaml-cfg f), else nil. Bounded: 32 occurrences, paid from the budget (past it: "runs").
local CONFIG_WORDS = {"config", "cfg", "deepspeed", "yaml", "json"}
local code_spans
local function file_use(det, doc, f, p)
  local s = doc.s
  local base = match(f, "([^/]+)$") or f
  local use = nil
  local function visit(h)
    local before = sub(s, line_start_near(s, h), h - 1)
    local prev = match(before, "([%w_%.%+%-]*)[ \t]+[%./%w_%-]*$")
    if match(before, "^[ \t]*[%./%w_%-]*$") then return "runs" end -- the file is the command
    if prev and (RUNS[prev] or prev == "+x" or prev == "-c") then return "runs" end
    local opt = match(before, "(%-[%w_%-]+)[= \t]+[%./%w_%-]*$")
    if opt then
      opt = lower(opt)
      for i = 1, #CONFIG_WORDS do
        if find(opt, CONFIG_WORDS[i], 1, true) then use = "config" end
      end
    end
    return nil
  end
  local spans, left = code_spans(doc), 32
  for j = 1, #spans do -- the code after p (a data body's text names no file to run)
    local a, b = spans[j][1], spans[j][2]
    if b > p then
      if a <= p then a = p + 1 end
      local r = each_find(det, s, base, a, b, "work budget (here-documents)", left, function(h)
        left = left - 1
        return visit(h)
      end)
      if r == "budget" then return "runs" end -- (past the budget: taken as run, the body is code)
      if r then return r end
      if left <= 0 then break end
    end
  end
  return use
end

-- The end of a here-document body that starts at p: the line that holds the delimiter alone
-- (after tabs for <<-) -> the body's last byte and the position after the delimiter; not found
-- (or past the budget): n, n + 1. Line by line (a search for the delimiter itself would stop at
-- every byte equal to its first): LINE_COST units a line and one per 16 bytes the newline search
-- passes, so a 330 kB manifest of 2,400 lines costs ~0.2 ms and a body of empty lines stops early.
local LINE_COST = 80
local function body_end_of(det, s, p, n, delim, strip)
  local d1, dl = byte(delim, 1), #delim
  while p <= n do
    local q = p
    if strip then
      q = match(s, "^\t*()", p)
      if det and not spend(det, q - p, "work budget (here-documents)", p) then break end
    end
    if byte(s, q) == d1 and sub(s, q, q + dl - 1) == delim then
      local tail = byte(s, q + dl)
      if tail == nil or tail == 10 or tail == 13 then return p - 1, q + dl end
    end
    local e = find(s, "\n", q, true)
    if det and not spend(det, LINE_COST + floor(((e or n) - q) / 16), "work budget (here-documents)", p) then break end
    if e == nil then break end
    p = e + 1
  end
  return n, n + 1
end

-- One lexer step at the special byte s[h]; returns where to go on.
local function lex_at(det, st, s, n, h)
  local c, regions = byte(s, h), st.regions
  if c == 92 then return h + 2 end
  if c == 39 or c == 34 or c == 96 or (c == 36 and byte(s, h + 1) == 39) then
    local e = string_end(det, st, s, h, c) or n
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
  local ls = line_start_near(s, h)
  local body_end, after = body_end_of(det, s, nl + 1, n, delim, strip)
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
  local s, n = doc.s, doc.n
  if st == nil then
    st = {pos = 1, regions = {}, nx = {}, nl = {}, n = n}
    doc.sh = st
  end
  if upto == nil or upto > n then upto = n end
  local i = st.pos
  local nx = st.nx
  if i <= upto and (st.w == nil or i < st.wa or upto > st.wb) then set_window(det, st, s, n, i, upto) end
  while i <= upto and not st.broken do
    if not lex_step(det, i, SH_STEP) then st.broken = true; break end
    if i > st.wb then set_window(det, st, s, n, i, upto) end
    -- the next special byte: the smallest of each one's next position (plain finds, each moving
    -- forward only: linear in the text whatever it holds)
    local h = nil
    for k = 1, #SPECIALS do -- (a position still ahead is used as it is: next_at only for the others)
      local c = SPECIALS[k]
      local at = nx[c]
      if at ~= false and (at == nil or at < i) then at = next_at(st, c, i) end
      if at and (h == nil or at < h) then h = at end
    end
    if st.pending and (h == nil or h > st.line_end) then
      i = st.resume -- the here-document's operator line is done: on after its body
      st.pending = nil
    elseif h == nil then
      i = st.wb + 1 -- nothing special up to the window's end
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

-- The here-document bodies of a script over 64 kB that may be data, found as the scan goes
-- (scan.lua): discover(det, doc, a, b) lexes up to the last "<<" in the code [a, b] and adds to
-- doc.data_bodies every here-document written to a file by cat/tee ({a, b, file}, in order). Once
-- the scan is done, file_use settles each: a file run later makes its body code again; a file
-- given to a config option makes it read whole (config). One search for "<<" per code segment
-- (its first byte may stop the find on every other byte: one unit a byte).
local function discover(det, doc, a, b)
  local last = nil
  each_find(det, doc.s, "<<", a, b, "work budget (here-documents)", 4096, function(h) last = h end, 1)
  if last == nil then return end
  local st = lex(det, doc, last)
  local bodies = doc.data_bodies
  for i = (doc.lex_seen or 0) + 1, #st.regions do
    local x = st.regions[i]
    if x.kind == "heredoc" and x.file and x.a > (bodies[#bodies] and bodies[#bodies].b or 0) then
      bodies[#bodies + 1] = x
    end
  end
  doc.lex_seen = #st.regions
end

-- The code of a document: [a, b] spans of its scanned text outside its data here-document bodies
-- (known for a script over 64 kB, scan.lua); searches for words of code skip the data.
code_spans = function(doc)
  local spans = doc.code_spans
  if spans then return spans end
  spans = {}
  local a, bodies = 1, doc.data_bodies or {}
  for i = 1, #bodies do
    local x = bodies[i]
    if x.a > a then spans[#spans + 1] = {a, x.a - 1} end
    a = x.b + 1
  end
  if a <= #doc.t then spans[#spans + 1] = {a, #doc.t} end
  if doc.bodies_settled then doc.code_spans = spans end -- (kept once the scan has settled them)
  return spans
end

-- Searches of the code for a word, for what only narrows a verdict's wording or is answered
-- conservatively when not searched (the launcher's name, an echo redefined): paid from a budget
-- of their own, WORD_SEARCH_MAX bytes of text for all of one job's (a search that exhausted the
-- work budget would make the job's scan incomplete). Whether visit(h) holds for an occurrence:
-- true, false, or nil when the word budget or max occurrences ran out first.
local WORD_SEARCH_MAX = 65536
local function search_code(det, doc, word, max, visit)
  local spans = code_spans(doc)
  local s = doc.t
  for j = 1, #spans do
    local a, b = spans[j][1], spans[j][2]
    local left = WORD_SEARCH_MAX - (det.word_bytes or 0)
    if left < b - a + 1 then
      if left < #word then return nil end
      b = a + left - 1
    end
    det.word_bytes = (det.word_bytes or 0) + b - a + 1
    local w = (a == 1 and b == #s) and s or sub(s, a, b)
    local p, done = 1, false
    for _ = 1, max do
      local h = find(w, word, p, true)
      if h == nil then done = true; break end
      if visit(a + h - 1) then return true end
      p = h + 1
    end
    if not done or b < spans[j][2] then return nil end -- (max occurrences looked at: not known)
  end
  return false
end

-- Whether the document defines a function or alias named echo or printf (then an echo line is
-- a command like any other). Searched once per document, when an echo line first matters; a
-- search the word budget stops answers yes (the echo line is then read as code).
local function defines(s, h, word)
  local before = sub(s, h > 16 and h - 16 or 1, h - 1)
  if match(before, "function[ \t]+$") or match(before, "alias[ \t]+$") then return true end
  return match(s, "^[ \t]*%(%)", h + #word) ~= nil
end
local function echo_redefined(det, doc)
  local r = doc.echo_def
  if r == nil then
    r = false
    for _, word in ipairs({"echo", "printf"}) do
      local found = search_code(det, doc, word, 256, function(h) return defines(doc.t, h, word) end)
      if found ~= false then r = true; break end
    end
    doc.echo_def = r
  end
  return r
end

return {WORD_START = WORD_START, word_start = word_start, region_at = region_at, discover = discover,
  file_use = file_use, echo_redefined = echo_redefined, code_spans = code_spans, search_code = search_code}
