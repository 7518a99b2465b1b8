-- rule scan-truncated: the scan stopped before the end of the script (its work budget ran out,
-- another limit was hit, or the script is over SCAN_MAX). The unread rest could hold a TP that
-- spans nodes, so a multi-node job cannot be cleared; a one-node job gets a warning.

local import = ...
local format = string.format
local floor = math.floor
local add_finding = import("fix", "add_finding")
local SCAN_MAX = import("lexer", "SCAN_MAX")

local function scan_truncated(ctx, f, out)
  local det = ctx.det
  if not det.truncated then return end
  local what
  if det.limit then
    what = format("the script is too large or repetitive to check completely (the filter's %s ran out%s)",
      det.limit, (det.limit_at and det.script_doc) and format(" at byte %d", det.limit_at) or "")
  else
    what = format("the script is too large to check completely (over %d MB)", floor(SCAN_MAX / 1048576))
  end
  if f.multi then
    add_finding(out, "reject", "scan-truncated", format(
      "%s, so this multi-node job on partition '%s' cannot be cleared. "
        .. "Fix: keep the batch script short (move data and generated configs into files).",
      what, f.pname))
  else
    add_finding(out, "warn", "scan-truncated", what .. "; only its first part was checked.")
  end
end

return {scan_truncated = scan_truncated}
