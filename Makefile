PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest compile mypyc-modules test-compiled wheel wheel-check demo bench \
	bench-deps clean

# The hot modules compiled with mypyc (optional: pure Python is the reference). The list is
# the wheel build hook's include/exclude in pyproject.toml, expanded by mypyc_modules.py; it is
# read when a recipe uses it (`=`, not `:=`), once the virtualenv exists.
COMPILED := build/compiled
MYPYC_MODULES = $(shell $(BIN)/python mypyc_modules.py)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,yaml,prometheus]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check apf_limiter tests benchmarks examples mypyc_modules.py
	$(BIN)/ruff format --check apf_limiter tests benchmarks examples mypyc_modules.py

typecheck: $(STAMP)
	$(BIN)/mypy --strict apf_limiter tests mypyc_modules.py

pytest: $(STAMP)
	$(BIN)/pytest -q

# A copy of the tree with the hot modules compiled, for benchmarks and test-compiled.
compile: $(STAMP)
	$(BIN)/python mypyc_modules.py > /dev/null  # a stale entry in the list stops here
	rm -rf $(COMPILED) && mkdir -p $(COMPILED)
	cp -r apf_limiter tests examples docs benchmarks mypyc_modules.py README.md $(COMPILED)/
	# What the copy was compiled from, for the benchmarks' result files (build/ is not in git).
	printf '%s %s\n' "$$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
		"$$(git status --porcelain -- apf_limiter 2>/dev/null | grep -q . && echo dirty || echo clean)" \
		> $(COMPILED)/SOURCE_REVISION
	printf '[mypy]\n[mypy-xxhash.*]\nignore_missing_imports = True\n' > $(COMPILED)/mypy.ini
	cd $(COMPILED) && ../../$(BIN)/mypyc $(MYPYC_MODULES) > mypyc.log 2>&1 || (tail -50 mypyc.log; exit 1)
	cp pyproject.toml $(COMPILED)/  # pytest's settings (after mypyc: its setuptools reads it)

# The files `make compile` and the wheel's build hook compile, one per line.
mypyc-modules: $(BIN)/python
	@$(BIN)/python mypyc_modules.py

# The whole suite again, against the compiled modules.
test-compiled: compile
	cd $(COMPILED) && APF_EXPECT_COMPILED=1 ../../$(BIN)/pytest -q tests

test: lint typecheck pytest test-compiled

# The two wheels, into dist/: pure Python (py3-none-any: any platform) and compiled by the
# mypyc build hook (this interpreter and platform), from the one module list. Each is built
# from its own copy of the sources: the hook leaves .so files next to the sources it compiles,
# and in the checkout they would shadow the sources. The hook is off by default; the
# environment variable turns it on for the compiled wheel.
WHEEL_SRC := build/wheel-src

wheel: $(STAMP)
	$(BIN)/python mypyc_modules.py > /dev/null  # a stale entry in the list stops here
	rm -rf $(WHEEL_SRC) && mkdir -p $(WHEEL_SRC)/pure $(WHEEL_SRC)/compiled dist
	rm -f dist/apf_limiter-*.whl
	for kind in pure compiled; do \
		cp -r apf_limiter pyproject.toml README.md mypyc_modules.py $(WHEEL_SRC)/$$kind/; \
		find $(WHEEL_SRC)/$$kind \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +; \
	done
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist $(WHEEL_SRC)/pure
	HATCH_BUILD_HOOK_ENABLE_MYPYC=true $(BIN)/pip wheel --quiet --no-deps --wheel-dir dist \
		$(WHEEL_SRC)/compiled
	ls dist/apf_limiter-*.whl

# The compiled wheel installed into a fresh virtualenv (build/wheel-check/): every listed
# module imports compiled, the examples and a smoke test pass (benchmarks/wheel_check.py).
wheel-check: wheel
	$(BIN)/python -m benchmarks.wheel_check

# `make demo` installs what the demo needs and nothing more (the package and uvicorn: the
# `demo` extra), so a fresh clone runs it without the dev toolchain. A virtualenv that
# `make test` set up already has it (the dev extra includes uvicorn), so pip is skipped then.
# Options go in DEMO_ARGS: make demo DEMO_ARGS='--elephant 24 --duration 60'.
DEMO_STAMP := $(VENV)/.installed-demo
DEMO_ARGS ?=

$(DEMO_STAMP): $(BIN)/python pyproject.toml
	if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; \
	else $(BIN)/pip install --quiet -e '.[demo]'; fi
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/apf-limiter demo $(DEMO_ARGS)

bench-deps: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,yaml,prometheus,bench]'

bench: bench-deps wheel-check
	$(BIN)/pytest benchmarks -q -p no:randomly --benchmark-only --benchmark-columns=min,median,iqr,rounds
	$(BIN)/python -m benchmarks.engine_bench
	$(BIN)/python -m benchmarks.metrics_overhead
	$(BIN)/python -m benchmarks.saturation_bench
	$(BIN)/python -m benchmarks.http_bench
	$(BIN)/python -m benchmarks.http_instructions
	$(BIN)/python -m benchmarks.fairness_bench
	$(BIN)/python -m benchmarks.peers  # apf-compiled is skipped unless `make compile` ran
	$(BIN)/python -m benchmarks.profile_hot_paths --flamegraph
	$(BIN)/python -m benchmarks.plots

# A million requests through APFMiddleware with disconnects and handler errors (~10 min).
soak: bench-deps
	$(BIN)/python -m benchmarks.long_run

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
	find apf_limiter -name '*.so' -delete  # left by a mypyc wheel build; they shadow the sources
