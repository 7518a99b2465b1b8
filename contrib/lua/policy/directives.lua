-- directives: the task options of a stored script's #SBATCH lines, for the modify hook. A job
-- record exposes min_cpus, pn_min_cpus and the GPU requests, but no release exposes num_tasks,
-- ntasks_per_node or cpus_per_task there, so an update that leaves them (scontrol update
-- NumTasks=16) is judged with what the script asked for. sbatch reads #SBATCH lines up to the
-- first command; so does this (at most 256 lines, 64 kB, component 0 of a het job).

local find, sub, match, gsub = string.find, string.sub, string.match, string.gsub

local OPTS = {
  ["--ntasks-per-node"] = "ntasks_per_node", ["--ntasks"] = "num_tasks", ["-n"] = "num_tasks",
  ["--cpus-per-task"] = "cpus_per_task", ["-c"] = "cpus_per_task", ["--ntasks-per-gpu"] = "ntasks_per_tres",
}

-- The words of one #SBATCH line's options ("-n 8", "--ntasks=8", "-n8") into out.
local function read_words(text, out)
  local words = {}
  for w in string.gmatch(text, "[^ \t\r]+") do
    if #words >= 64 then break end
    words[#words + 1] = (gsub(w, "[\"']", ""))
  end
  local i = 1
  while i <= #words do
    local w = words[i]
    local name, value = match(w, "^(%-%-[%w%-]+)=(.*)$")
    if name == nil then
      name = w
      if OPTS[name] then
        value = words[i + 1]
        i = i + 1
      else
        local short, rest = match(w, "^(%-[nc])(%d+)$")
        if short then name, value = short, rest end
      end
    end
    local key = OPTS[name]
    if key and value and match(value, "^%d+$") and #value <= 6 then out[key] = tonumber(value) end
    i = i + 1
  end
end

-- The task options of the script's #SBATCH lines: {num_tasks, ntasks_per_node, cpus_per_task,
-- ntasks_per_tres}, each nil when not given.
local function sbatch_directives(script)
  local out = {}
  if type(script) ~= "string" then return out end
  local s = sub(script, 1, 65536)
  local p = 1
  for _ = 1, 256 do
    local nl = find(s, "\n", p, true)
    local line = sub(s, p, (nl or (#s + 1)) - 1)
    if find(line, "^#SBATCH") then
      local text = sub(line, 8)
      if find(text, "^[ \t]+hetjob") or find(text, "^[ \t]+packjob") then break end
      read_words(text, out)
    elseif not (find(line, "^%s*#") or find(line, "^%s*$")) then
      break -- sbatch stops at the first command
    end
    if nl == nil then break end
    p = nl + 1
  end
  return out
end

return {sbatch_directives = sbatch_directives}
