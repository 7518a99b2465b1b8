-- luacheck settings for contrib/lua (`make lint`, run from the repository root).
--
-- The union of the Lua versions the filter meets: slurmctld/Slurm clients link Lua 5.1
-- (Debian bookworm), 5.3 or 5.4. luacheck accepts a name that any of them defines, so
-- whether a function exists on each version is left to the tests, which run the policy
-- under lua5.1 and lupa; luacheck finds undefined and unused names, shadowing and dead code.
std = "lua51+lua53+lua54"
max_line_length = 120

-- The adapters are not loadable alone: `slurmgpu admin render-filter` (slurmgpu/policy.py
-- render_filter) puts `local TOPO = {...}` (the site table) and
-- `local P = (function() <the assembled policy modules> end)()` above each of them, so P and TOPO are names
-- they read. `slurm` is the table that slurmctld or the Slurm client provides
-- (slurm_stub.lua outside Slurm). The globals they set are the entry points Slurm calls
-- (slurm_job_submit, slurm_cli_*), and slurmgpu_filter / slurmgpu_spank for
-- `slurmgpu check`, the stub and the tests.
files["contrib/lua/job_submit_adapter.lua"] = {
  read_globals = {"P", "TOPO", "slurm"},
  globals = {"slurm_job_submit", "slurm_job_modify", "slurmgpu_filter"},
}
files["contrib/lua/cli_filter_adapter.lua"] = {
  read_globals = {"P", "TOPO", "slurm"},
  globals = {"slurm_cli_setup_defaults", "slurm_cli_pre_submit", "slurm_cli_post_submit", "slurmgpu_filter"},
}
files["contrib/lua/spank_adapter.lua"] = {
  read_globals = {"P", "TOPO"},
  -- slurmgpu_spank_check is what contrib/spank/slurmgpu_spank.c calls; slurmgpu_spank_batch what it
  -- reads to know whether the policy judges the batch step (policy.script_check batch-step).
  globals = {"slurmgpu_spank_check", "slurmgpu_spank", "slurmgpu_spank_batch"},
}
-- The stub plays slurmctld: it defines `slurm` and `slurmgpu_stub`, and calls the entry
-- points that the rendered job_submit.lua defines.
files["contrib/lua/slurm_stub.lua"] = {
  globals = {"slurm", "slurmgpu_stub"},
  read_globals = {"slurmgpu_filter", "slurm_job_submit"},
}
