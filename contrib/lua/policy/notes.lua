-- notes: what the user is told about the detection itself, whatever the rules found: a script
-- generated for another site, a stamp or SLURMGPU_TP that the launcher flags contradict (the
-- flags are checked), a scan limit hit, a value the filter could not read.

local import = ...
local format = string.format
local env_int, clean = import("util", "env_int", "clean")
local push_unique, seen_in = import("verdict", "push_unique", "seen_in")

local function note_detection(v, det, L, topo, seen)
  local wlist = v.mode == "shadow" and v.shadow_warnings or v.warnings -- to the user or not
  local w = seen_in(seen, "w")
  if det.stamp and det.stamp.site and topo.site and det.stamp.site ~= topo.site then
    push_unique(wlist, w, format("slurmgpu: the script was generated for site '%s' but this cluster is '%s'.",
      det.stamp.site, clean(topo.site, 64)))
  end
  if det.source == "flags" then
    -- the stamp and SLURMGPU_TP only fill in: visible flags that disagree win, and the user is told
    local other, said = nil, nil
    if det.stamp and det.stamp.tp and det.stamp.tp ~= L.tp then
      other, said = "slurmgpu stamp", det.stamp.tp
    else
      local etp = env_int(det.env, "SLURMGPU_TP") -- only TP is compared (one lookup, not five)
      if etp and etp ~= L.tp then other, said = "SLURMGPU_TP environment variable", etp end
    end
    if other then
      push_unique(wlist, w, format(
        "slurmgpu: the %s says TP=%d but the script's launcher flags say TP=%d; the filter checks the flags (TP=%d).",
        other, said, L.tp, L.tp))
    end
  end
  if det.notes then
    push_unique(wlist, w, "slurmgpu: filter limit: " .. det.notes[1] .. ".")
  end
  if #det.unreadable > 0 and #v.partitions > 0 and v.mode ~= "off" then
    push_unique(wlist, w, format("slurmgpu: could not read the value of '%s'; the filter did not check it.",
      det.unreadable[1]))
  end
end

return {note_detection = note_detection}
