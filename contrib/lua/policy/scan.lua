-- scan: the keyword scan of a document. Plain finds of anchors with distinct first bytes,
-- a cheap test of the bytes around each hit, then the option token, its separator and value;
-- values are resolved once the document is read (shellvars) and kept per parameter.

local import = ...
local find, sub, byte, match, gsub =
  string.find, string.sub, string.byte, string.match, string.gsub
local DIGIT_COST, HIT_COST, LATER_CHUNK_COST, MISS_COST, WORK_MAX, spend =
  import("budget", "DIGIT_COST", "HIT_COST", "LATER_CHUNK_COST", "MISS_COST", "WORK_MAX", "spend")
local env_prefix_end = import("commands", "env_prefix_end")
local CHUNK, in_comment, message_line = import("lexer", "CHUNK", "in_comment", "message_line")
local DASH_KEY_AT, DASH_ONLY, DASH_SECOND, ENV_NAMES, KEYWORDS, KEY_ABBR, KEY_NEXT, KEY_PREV_BYTES, OPTCH,
  name_kind = import("names", "DASH_KEY_AT", "DASH_ONLY", "DASH_SECOND", "ENV_NAMES", "KEYWORDS", "KEY_ABBR",
    "KEY_NEXT", "KEY_PREV_BYTES", "OPTCH",
    "name_kind")
local resolve = import("shellvars", "resolve")
local clean = import("util", "clean")
local discover, file_use = import("shell", "discover", "file_use")
local read_value = import("values", "read_value")


local TOKEN_MAX = 96       -- longest option name considered
local MAX_VALUES = 32      -- values remembered per parameter (the largest and smallest always are)

local MAX_RECS = 256        -- values remembered with their position, all parameters together

-- Option token around a keyword hit: [ts, te] or nil when too long. Its start is the byte after
-- the last non-option byte in the TOKEN_MAX + 1 bytes before the hit, found by one anchored
-- match (greedy, backtracking from the window's end: linear in the window) instead of a loop
-- over bytes, which was a quarter of a typical scan.
local function token_bounds(s, h, klen)
  local ts = h
  if h > 1 and OPTCH[byte(s, h - 1)] then
    local a = h - TOKEN_MAX - 1
    local cut = match(sub(s, a < 1 and 1 or a, h - 1), "^.*[^0-9A-Za-z%-%._+]()")
    if cut then ts = (a < 1 and 1 or a) + cut - 1
    elseif a < 1 then ts = 1
    else return nil, h + klen end
  end
  local _, e = find(s, "^[%w%-%._+]*", h + klen)
  local te = e or (h + klen - 1)
  if te - ts + 1 > TOKEN_MAX then return nil, te end
  return ts, te
end

-- Tokens already normalized (option names repeat across submissions): name, lead, dotted.
-- Bounded: starts over past NORM_MAX entries.
-- Three flat tables, not a table per entry: fewer objects for slurmctld's garbage collector to mark.
local NORM_MAX = 1024
local norm_last, norm_lead, norm_dotted, norm_n = {}, {}, {}, 0
local function normalize(tok)
  local last = norm_last[tok]
  if last then return last, norm_lead[tok], norm_dotted[tok] end
  local lead, rest = match(tok, "^([-+]*)(.*)$")
  local dotted = find(rest, ".", 1, true) ~= nil
  last = rest
  if dotted then last = match(rest, "^.*%.(.*)$") end -- anchored: linear
  if find(last, "_", 1, true) then last = gsub(last, "_", "-") end
  if norm_n >= NORM_MAX then norm_last, norm_lead, norm_dotted, norm_n = {}, {}, {}, 0 end
  norm_last[tok], norm_lead[tok], norm_dotted[tok] = last, lead, dotted
  norm_n = norm_n + 1
  return last, lead, dotted
end

-- Skip the separator between an option and its value: blanks, '=' (or ':' for config keys),
-- and backslash-newline continuations. Returns the value position, or nil if adjacent.
local function skip_sep(s, q, allow_colon)
  local start = q
  if allow_colon then -- a JSON key's closing quote: "autotp_size": 16
    local c0 = byte(s, q)
    if (c0 == 34 or c0 == 39) and byte(s, q + 1) == 58 then q = q + 1; start = q end
  end
  for _ = 1, 8 do
    local _, e = find(s, "^[ \t]+", q)
    if e then q = e + 1 end
    local _, e2 = find(s, "^\\\r?\n", q)
    if e2 then q = e2 + 1 else break end
  end
  local c = byte(s, q)
  if c == 61 or (allow_colon and c == 58) then
    q = q + 1
    local _, e = find(s, "^[ \t]*", q)
    return e + 1, c == 58
  end
  if q == start then return nil end
  return q
end

-- Whether the token [ts, te] is a YAML key: first on its line (after blanks or a "- " list
-- marker) and followed by ':' (SGLang's --config file: `tp-size: 16`).
local function yaml_key(s, ts, te)
  if byte(s, te + 1) ~= 58 then return false end
  local ls = ts
  while ls > 1 and ts - ls < 64 do
    local c = byte(s, ls - 1)
    if c == 10 then break end
    if c ~= 32 and c ~= 9 and c ~= 45 then return false end
    ls = ls - 1
  end
  return true
end

local function add_value(det, kind, value, rec)
  local vals = det.values[kind]
  if vals == nil then vals = {}; det.values[kind] = vals end
  local n = #vals
  if n < MAX_VALUES then
    vals[n + 1] = value
  elseif type(value) == "number" then
    -- full: two more slots keep the largest and the smallest number seen (the rules read the
    -- largest TP and the smallest ranks per node)
    det.values_full = true
    if n == MAX_VALUES then vals[n + 1] = value; vals[n + 2] = value
    elseif value > vals[MAX_VALUES + 1] then vals[MAX_VALUES + 1] = value
    elseif value < vals[MAX_VALUES + 2] then vals[MAX_VALUES + 2] = value end
  end
  -- every value with where it was seen (a het step or one launcher's flags is judged apart)
  -- (the record itself is the entry: kind, value and rec = itself, one table less per value)
  rec.kind, rec.value, rec.rec = kind, value, rec
  if #det.recs < MAX_RECS then det.recs[#det.recs + 1] = rec end
  if kind == "tp" and det.tp_token == nil then det.tp_token = rec end
  if kind == "tp" and type(value) == "number" then
    if det.tp_best == nil or value > det.tp_best.value then det.tp_best = rec end
  end
end

-- Whether one of the stems ends right before position h (an abbreviation: "--tensor-p" + "arallel").
local function after_stem(s, h, stems)
  for i = 1, #stems do
    local st = stems[i]
    if h > #st and sub(s, h - #st, h - 1) == st then return true end
  end
  return false
end

-- Keyword hits in one chunk [a, b] of the document -> raw records (the value not yet resolved).
local function scan_chunk(det, doc, a, b, raws, keys, whole)
  keys = keys or KEYWORDS
  local s = doc.s
  -- finds stay inside the chunk (+ the tail of a token): a copy of it, unless it runs to the end
  -- (or the caller lets one search of a small document run past it: whole)
  local piece, off, init = s, 0, a
  if b + TOKEN_MAX < #s and not whole then piece, off, init = sub(s, a, b + TOKEN_MAX), a - 1, 1 end
  for ki = 1, #keys do
    local key = keys[ki]
    local dashes = key == "--" -- one needle for the keys DASH_KEY_AT names by the next two bytes
    local want, nexts, klen, abbr = KEY_PREV_BYTES[key], KEY_NEXT[key], #key, KEY_ABBR[key]
    local p = init
    while true do
      local h0 = find(piece, key, p, true)
      if h0 == nil or off + h0 > b then break end
      local c2 = dashes and byte(piece, h0 + 2)
      if dashes and not DASH_SECOND[c2] then
        -- most "--" start an option that is none of the keys: the cheap test first
        local w = det.work + MISS_COST
        det.work = w
        if w > WORK_MAX and not spend(det, 0, "work budget (option-like words)", off + h0) then return false end
        p = c2 == 45 and h0 + 1 or h0 + 2
      else
      local h = off + h0
      local pass = true
      if dashes then
        local k = DASH_KEY_AT[c2 * 256 + (byte(s, h + 3) or 0)]
        if k then -- the key starts at the second dash (its one byte before is the first)
          h, want, nexts, klen, abbr = h + 1, KEY_PREV_BYTES[k], KEY_NEXT[k], 3, KEY_ABBR[k]
        else
          pass = false
        end
      end
      local pc = byte(s, h - 1)
      if pass then -- (not for a "--" that starts none of the keys)
        if want then pass = pc ~= nil and want[pc] == true
        elseif want == false then pass = not (pc and OPTCH[pc]) end
      end
      if pass then
        local nc = byte(s, h + klen)
        if nc == nil or not OPTCH[nc] then nc = 0 end
        pass = nexts[nc] == true
        if not pass and abbr and abbr[nc] then pass = after_stem(s, h, abbr[nc]) end
      end
      if not pass then
        local w = det.work + MISS_COST -- spend(), inlined: this runs once per needle stop
        det.work = w
        if w > WORK_MAX and not spend(det, 0, "work budget (option-like words)", h) then return false end
        p = h0 + 1
      else
      det.hits = det.hits + 1
      if not spend(det, HIT_COST, "work budget (option-like words)", h) then return false end
      local ts, te = token_bounds(s, h, klen)
      p = te - off + 1
      if ts and not doc.seen[ts] then
        doc.seen[ts] = true
        local tok = sub(s, ts, te)
        local name, lead, dotted = normalize(tok)
        local dash = find(lead, "-", 1, true) ~= nil
        local kind = name_kind(name, dash)
        local yaml = kind and not dash and DASH_ONLY[name] and kind ~= "segment" and yaml_key(s, ts, te)
        local envp = ENV_NAMES[tok]
        if envp and byte(s, te + 1) == 61 then
          local v, e, decoded = read_value(s, te + 2)
          if decoded and not spend(det, decoded * DIGIT_COST, "work budget (Unicode digits)", ts) then return false end
          if v and e and env_prefix_end(det, s, ts, e, doc.argv) and not in_comment(doc, ts) then
            raws[#raws + 1] = {kind = envp, v = v, doc = doc, pos = ts, name = tok, dash = false, dotted = false,
                               env = true}
          end
        elseif kind and (dash or yaml or (not DASH_ONLY[name])) and (kind ~= "segment" or dash) then
          local com, line = in_comment(doc, ts)
          local directive = com and line.cs == line.ls and sub(s, line.ls, line.ls + 6) == "#SBATCH"
          if (not com and kind ~= "segment" and not message_line(doc, line)) or (kind == "segment" and directive) then
            local q, colon = skip_sep(s, te + 1, (not dash) and (yaml or not DASH_ONLY[name]))
            local v, _, decoded = read_value(s, q, colon)
            if decoded and not spend(det, decoded * DIGIT_COST, "work budget (Unicode digits)", ts) then
              return false
            end
            if v then
              raws[#raws + 1] = {kind = kind, v = v, doc = doc, pos = ts, name = tok, dash = dash, dotted = dotted,
                                 short = (lead == "-")}
            end
          end
        end
      end
      end
      end
    end
  end
  return true
end

-- The end of the script's leading block of comment lines (shebang, #SBATCH directives, a
-- generated header) within [1, b], and where its first #SBATCH is. Nothing on a line that starts
-- with '#' runs, and only #SBATCH --segment is read from such lines, so the keyword scan looks
-- for "segment" alone from there and skips the rest (a generated header is half a script). One
-- plain search per line, HEADER_LINES at most.
local HEADER_LINES = 256
local last_wins
local SUPERSEDED = {} -- a record without a value
local SEGMENT_ONLY = {"segment"}
local function header_end(doc, b)
  local s = doc.s
  if #s > b then s = sub(s, 1, b) end -- a newline is looked for inside [1, b] only
  local p = 1
  for _ = 1, HEADER_LINES do
    if byte(s, p) ~= 35 then break end
    local nl = find(s, "\n", p, true)
    if nl == nil then p = #s + 1; break end
    p = nl + 1
  end
  local sa = find(s, "#SBATCH", 1, true)
  if sa and sa >= p then sa = nil end
  return p - 1, sa
end

-- Whether [a, b] of doc is inside one command: every newline between them is a backslash
-- continuation and no ; & | separates them (a quoted one counts too: the larger value stays).
local function same_command(det, doc, a, b)
  if b - a > 65536 or not spend(det, b - a, "work budget (repeated options)", a) then return false end
  local seg = sub(doc.s, a, b)
  if find(seg, "[;&|]") then return false end
  if doc.argv then return true end
  local p = 1
  while true do
    local nl = find(seg, "\n", p, true)
    if nl == nil then return true end
    local e = nl - 1
    if byte(seg, e) == 13 then e = e - 1 end
    if byte(seg, e) ~= 92 then return false end
    p = nl + 1
  end
end

-- argparse keeps the last of a repeated option (so does bash for NAME=value prefixes): of two
-- values of one parameter in one command, the earlier is marked superseded and not judged.
last_wins = function(det, doc, raws)
  if #raws < 2 then return end
  local by = {}
  for i = 1, #raws do
    local r = raws[i]
    local list = by[r.kind]
    if list == nil then list = {}; by[r.kind] = list end
    list[#list + 1] = r
  end
  for _, list in pairs(by) do
    if #list > 1 and #list <= 64 then
      table.sort(list, function(x, y) return x.pos < y.pos end)
      for i = 1, #list - 1 do
        if list[i].v.k ~= "bad" and list[i + 1].v.k ~= "bad" and list[i].env == list[i + 1].env
            and same_command(det, doc, list[i].pos, list[i + 1].pos) then
          list[i].superseded = true
        end
      end
    end
  end
end

-- Data here-document bodies (written to a file nothing runs: a manifest, a YAML config) are
-- searched only for the keys a config file holds (every TP-like key ends in -size or -degree:
-- tensor_model_parallel_size, tp-size, autotp_size, megatron_lm_tp_degree): two needles of
-- distinct first bytes, DATA_BYTE_COST units a byte. A body is read in its first DATA_HEAD bytes
-- (a config file is smaller), the whole of it when the script gives the file to a config option
-- (--deepspeed_config F, --config F: shell.file_use); the rest of a long data file (a 330 kB
-- manifest) is not read and costs nothing. A body whose file the script runs is read as code.
local CONFIG_KEYWORDS = {"size", "degree"}
local DATA_BYTE_COST = 2
local DATA_HEAD = 65536

-- The last byte of a body read while scanning (the rest waits for the file's use).
local function read_end(x)
  if x.b - x.a < DATA_HEAD then return x.b end
  return x.a + DATA_HEAD - 1
end

-- Scan [a, b] (any length) in chunks: code with every keyword at rate units a byte, or a data
-- body with the config keys. False once the budget stops it.
local function scan_span(det, doc, a, b, raws, keys, rate)
  while a <= b do
    local y = a + CHUNK - 1
    if y > b then y = b end
    if not spend(det, rate * (y - a + 1), "work budget (script size)", a) then return false end
    if not scan_chunk(det, doc, a, y, raws, keys) then return false end
    a = y + 1
  end
  return true
end

-- The bodies found provisionally data, once the whole script was read: a file run later makes its
-- body code (scanned now, as code), a file given to a config option makes it read whole.
local function settle_bodies(det, doc, raws)
  local bodies, data = doc.data_bodies, {}
  local ok = true
  for i = 1, #bodies do
    local x = bodies[i]
    local use = "runs" -- (once the budget stopped the scan: every body counts as code)
    if ok then use = file_use(det, doc, x.file, x.b) end
    if use == "runs" then
      if ok then ok = scan_span(det, doc, x.a, x.b, raws, KEYWORDS, LATER_CHUNK_COST) end
    else
      if use == "config" and ok and read_end(x) < x.b then
        ok = scan_span(det, doc, read_end(x) + 1, x.b, raws, CONFIG_KEYWORDS, DATA_BYTE_COST)
      end
      data[#data + 1] = x
    end
  end
  doc.data_bodies = data
  doc.bodies_settled = true
  return ok
end

local function by_pos(x, y) return x.pos < y.pos end

local function scan_doc(det, doc, env)
  local raws = {}
  local a = 1
  -- a script over one chunk: its here-documents written to files are found as the scan goes
  -- (shell.discover) and read as data (only for config keys) until settled at the end
  local big = doc.n > CHUNK and not doc.argv
  doc.data_bodies = {}
  local bodies = doc.data_bodies
  local bi = 1
  local stopped = false
  while a <= doc.n do
    local b = a + CHUNK - 1
    if b > doc.n then b = doc.n end
    local rate = a == 1 and 1 or LATER_CHUNK_COST
    local from, ok = a, true
    if a == 1 and not doc.argv then
      local last, sa = header_end(doc, b)
      ok = spend(det, last, "work budget (script size)", 1)
      if ok and sa then ok = scan_chunk(det, doc, sa, last, raws, SEGMENT_ONLY, #doc.s <= CHUNK) end
      from = last + 1
    end
    while ok and from <= b do
      while bodies[bi] and bodies[bi].b < from do bi = bi + 1 end
      local body = bodies[bi]
      if body and body.a <= from then -- a data body: its config keys, then (a long one) nothing
        local re = read_end(body)
        if from <= re then
          local y = re < b and re or b
          ok = spend(det, DATA_BYTE_COST * (y - from + 1), "work budget (script size)", from)
            and scan_chunk(det, doc, from, y, raws, CONFIG_KEYWORDS)
          from = y + 1
        else
          from = (body.b < b and body.b or b) + 1
        end
      else -- code, up to the next body (one found here ends it too)
        local y = (body and body.a <= b) and body.a - 1 or b
        if big then
          discover(det, doc, from, y)
          local nb = bodies[bi]
          if nb and nb.a > from and nb.a - 1 < y then y = nb.a - 1 end
        end
        ok = spend(det, rate * (y - from + 1), "work budget (script size)", from)
          and scan_chunk(det, doc, from, y, raws, nil, not big and #doc.s <= CHUNK)
        from = y + 1
      end
    end
    if not ok then stopped = true; break end
    doc.scanned = b
    a = b + 1
  end
  if big and not stopped and #bodies > 0 then
    if not settle_bodies(det, doc, raws) then stopped = true end
    table.sort(raws, by_pos)
  end
  doc.bodies_settled = true
  if doc.scanned < #doc.s then
    doc.truncated = true
    if doc.scanned < doc.n then doc.t = sub(doc.s, 1, doc.scanned) end
  end
  if stopped then doc.truncated = true end
  last_wins(det, doc, raws)
  for i = 1, #raws do
    -- a value a later one of the same command replaces is not judged
    local r = not raws[i].superseded and raws[i] or SUPERSEDED
    local kind, v, rec = r.kind, r.v, r -- a raw record is the value's record (det.recs) too
    if v == nil then -- luacheck: ignore 542 (superseded)
    elseif v.k == "bad" then
      if (kind == "tp" or kind == "pp" or kind == "nproc") and #det.unreadable < 8 then
        det.unreadable[#det.unreadable + 1] = clean(rec.name, 40) .. " " .. clean(v.text, 24)
      end
    else
      local res = resolve(det, doc, v, rec.pos, env, 0)
      if type(res) == "table" and res.alt then
        -- branches: the verdict takes the smallest (a job is rejected when every branch spans);
        -- the largest is remembered for a warning that names its line
        local lo, hi = res.alt[1], res.alt[1]
        for k = 2, #res.alt do
          if res.alt[k].n < lo.n then lo = res.alt[k] end
          if res.alt[k].n > hi.n then hi = res.alt[k] end
        end
        add_value(det, kind, kind == "nproc" and hi.n or lo.n, rec)
        if kind == "tp" and hi.n > lo.n and (det.branch_tp == nil or hi.n > det.branch_tp.n) then
          det.branch_tp = {n = hi.n, pos = hi.pos, doc = doc, rec = rec}
        end
      elseif res ~= nil then
        add_value(det, kind, res, rec)
      elseif (v.k == "var" or v.k == "expr" or v.k == "cat") and (kind == "tp" or kind == "nproc")
          and #det.unreadable < 8 then
        det.unreadable[#det.unreadable + 1] = clean(rec.name, 40) .. " "
          .. (v.k == "var" and ("$" .. clean(v.name, 24)) or v.k == "cat" and "(a word of several parts)" or "$((...))")
      end
    end
  end
  if doc.truncated then det.truncated = true end
end

return {scan_doc = scan_doc, normalize = normalize, MAX_VALUES = MAX_VALUES}
