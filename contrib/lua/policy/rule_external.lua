-- rule external-gpu-job: `sbatch --external` (Slurm 25.05+) makes a job without a batch script
-- or environment for the filter to read, and the processes a site attaches to it never pass
-- slurmstepd, so the SPANK launch guard does not see them either: nothing can check where its
-- TP/CP/EP groups run. A GPU job of that kind that may span nodes is refused where the partition
-- is enforced (a warning where it is warn-only); on one node its groups stay on that node's
-- NVLink, so it passes. Exempt users and accounts pass as for any job.

local import = ...
local format = string.format
local label_of = import("fix", "label_of")
local add_finding = import("fix", "add_finding")
local asks_for_gpus = import("shape", "asks_for_gpus")
local flag_set, plural = import("util", "flag_set", "plural")

local EXTERNAL_JOB = 16777216 -- job_desc.bitflags SLURM_BIT(24) (slurm.h), set by sbatch --external

local function external_gpu_job(ctx, f, out)
  local job = ctx.job
  if not (f.multi and flag_set(job.bitflags, EXTERNAL_JOB) and asks_for_gpus(job)) then return end
  add_finding(out, "reject", "external-gpu-job", format(
    "this external job (sbatch --external) asks for GPUs on %s%s of %s: it has no script or environment "
      .. "for the filter to read and its processes do not pass slurmstepd, so nothing can check that its "
      .. "tensor-parallel groups stay inside an NVLink domain. Fix: submit a batch script (sbatch script.sh) "
      .. "or use one node (--nodes=1).",
    plural(f.nmin, "node"), f.nmax and f.nmax > f.nmin and format(" (up to %d)", f.nmax) or "", label_of(ctx)))
end

return {external_gpu_job = external_gpu_job}
