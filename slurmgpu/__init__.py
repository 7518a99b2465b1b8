"""slurmgpu: multi-node GPU jobs on Slurm that are correct by construction."""

__version__ = "0.1.0"
