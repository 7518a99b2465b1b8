# `make test` is the README's test command and what .ci/run calls: it installs what the
# suite needs (Debian's Slurm/munge/Lua 5.1/shellcheck when run as root, plus cached
# chroots with the other Debian releases' Slurm -- 24.11 and 26.05 on Debian 12, 22.05 and
# 26.05 on Debian 13 -- built by contrib/testcluster/make-chroot.sh; Python test
# dependencies) and runs every test. The local Slurm clusters (one per release) are started
# by the tests.
PYTHON ?= python3

.PHONY: test test-serial deps test-unit bench docs-img lint lint-format lint-ruff lint-mypy lint-vermin lint-shell lint-lua

test: deps
	PYTHON=$(PYTHON) bash .ci/test-matrix

# the same tests in one pytest process (slower; for bisecting an interaction between tests)
test-serial: deps
	$(PYTHON) -m pytest -q

deps:
	@if [ "$$(id -u)" = 0 ]; then bash contrib/testcluster/install-deps.sh; \
	 else echo "not root: skipping Debian packages (cluster tests will be skipped unless already installed)"; fi
	$(PYTHON) -m pip install -q --disable-pip-version-check -e '.[test,e2e,lint,contract]'
	$(PYTHON) contrib/contract/make_env.py

test-unit:
	$(PYTHON) -m pytest -q -m "not cluster"

bench:
	$(PYTHON) bench/plan_bench.py
	$(PYTHON) bench/gen_bench.py
	$(PYTHON) bench/filter_bench.py
	$(PYTHON) bench/submit_bench.py
	$(PYTHON) bench/spank_bench.py
	$(PYTHON) bench/explain_bench.py
	$(PYTHON) bench/replay_speed.py
	$(PYTHON) bench/plan_accuracy.py --by-source
	$(PYTHON) bench/affinity_bench.py

# `make lint` runs every check below (also after one fails) and fails if any failed; the
# same commands are the hooks in .pre-commit-config.yaml. Tools: `make deps` (ruff, mypy and
# stubs from the `lint` extra; shellcheck and luacheck from install-deps.sh, as root).
LINT_CHECKS = lint-format lint-ruff lint-mypy lint-vermin lint-shell lint-lua
# Every shell script under contrib/ and .ci/: *.sh files and files with a sh/bash shebang.
SHELL_SCRIPTS = $(shell find contrib .ci -type f \( -name '*.sh' -o -name '*.bash' -o -exec sh -c \
	'head -n1 "$$1" | grep -qE "^\#!.*[/ ](ba|da|k)?sh([[:space:]]|$$)"' _ {} \; \) -print | sort)

lint:
	@failed=""; for t in $(LINT_CHECKS); do \
	  echo "== $$t"; $(MAKE) --no-print-directory $$t || failed="$$failed $$t"; done; \
	 if [ -n "$$failed" ]; then echo "make lint: FAILED:$$failed" >&2; exit 1; fi; \
	 echo "make lint: all checks passed"

# The explain view's pictures in docs/explain.md (tests/test_explain.py checks they are current).
docs-img:
	$(PYTHON) -m tests.gen_explain_img

lint-format:
	$(PYTHON) -m ruff format --check --output-format concise . || { echo "run: ruff format . (see the diff with: ruff format --diff .)" >&2; exit 1; }

lint-ruff:
	$(PYTHON) -m ruff check .

lint-mypy:
	$(PYTHON) -m mypy slurmgpu

lint-vermin:
	vermin --no-tips --violations --eval-annotations -t=3.9- slurmgpu

lint-shell:
	@command -v shellcheck >/dev/null || { echo "shellcheck not found: run 'bash contrib/testcluster/install-deps.sh' as root" >&2; exit 1; }
	shellcheck $(SHELL_SCRIPTS)

lint-lua:
	@command -v luacheck >/dev/null || { echo "luacheck not found: apt-get install lua-check, or run 'bash contrib/testcluster/install-deps.sh' as root" >&2; exit 1; }
	luacheck --no-color -q contrib/lua
