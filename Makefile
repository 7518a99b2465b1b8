# `make test` is the README's test command and what .ci/run calls: it installs what the
# suite needs (Debian's Slurm/munge/Lua 5.1/shellcheck when run as root, plus a cached
# chroot with the other Debian release's Slurm -- 24.11 on Debian 12, 22.05 on Debian 13 --
# built by contrib/testcluster/make-chroot.sh; Python test dependencies) and runs every
# test. The local Slurm clusters (one per release) are started by the tests.
PYTHON ?= python3

.PHONY: test deps test-unit bench lint

test: deps
	$(PYTHON) -m pytest -q

deps:
	@if [ "$$(id -u)" = 0 ]; then bash contrib/testcluster/install-deps.sh; \
	 else echo "not root: skipping Debian packages (cluster tests will be skipped unless already installed)"; fi
	$(PYTHON) -m pip install -q --disable-pip-version-check -e '.[test,e2e]'

test-unit:
	$(PYTHON) -m pytest -q -m "not cluster"

bench:
	$(PYTHON) bench/plan_bench.py
	$(PYTHON) bench/gen_bench.py
	$(PYTHON) bench/filter_bench.py
	$(PYTHON) bench/submit_bench.py
	$(PYTHON) bench/spank_bench.py

lint:
	vermin --no-tips --violations --eval-annotations -t=3.9- slurmgpu
