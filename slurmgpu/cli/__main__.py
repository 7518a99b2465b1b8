"""`python -m slurmgpu.cli`, as the tests and bench run it."""

from slurmgpu.cli import main

main()
