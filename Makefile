# cachewarm — one entry point for building, testing and running.
#   make demo    the main job on the embedded default: a local warm between two local memcacheds
#                (installs only what that needs: memcached, the dumper's build tools, runtime Python deps)
#   make test    everything CI runs (installs the whole development toolchain first)
SHELL := /bin/bash
JOBS ?= 2
DUMPER_SRC := dumper-cpp
BUILD := build
DUMPER := $(BUILD)/release/cachewarm-dump
# apt packages: what a local warm needs (the release dumper's build, memcached, Python headers for the
# populator's C loop), and what only the tests add (GoogleTest for the dumper's unit tests; xfsprogs:
# the shared-volume tests on loop devices; nutcracker and python3-pylibmc: the real clients
# tests/placement reads warmed keys back through; faketime: destinations whose clock disagrees;
# libevent-dev and xz-utils: tests/memcached/build.sh's, installed here so that apt runs once, first).
APT_RUN := memcached cmake g++ make libxxhash-dev python3-dev
APT_DEV := $(APT_RUN) libgtest-dev googletest clang xfsprogs nutcracker python3-pylibmc faketime libevent-dev xz-utils
# Stamps keep re-runs fast; they live in build/ (ignored by git).
STAMPS := $(BUILD)/.stamps

# Every Python step runs in the project's virtual environment, made by .ci/venv.sh from the system's
# python3 (Debian's /usr/bin/python3 when present; SYSTEM_PYTHON=... picks another >= 3.11). Nothing is
# pip-installed outside it. Its install stamps live inside it, so `rm -rf .venv` starts over.
VENV := .venv
PY := $(CURDIR)/$(VENV)/bin/python
PIP_INSTALL := $(PY) -m pip install -q --disable-pip-version-check
# pip builds the package in the source tree (egg-info, build/lib*): the editable installs and the
# bundle's wheel take this lock, so that `make -j` (make test) runs them one after the other.
SOURCE_BUILD := flock $(CURDIR)/$(VENV)/.source-build.lock
# For recipes whose programs start `python3` (cdk.json's app, tests) or `cachewarm` by name.
IN_VENV := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)"

.PHONY: all venv deps deps-apt deps-apt-run deps-apt-node deps-run deps-infra deps-py deps-node build dumper dumper-asan vectors memcached-versions test test-steps test-cpp test-py test-matrix lint demo bench bench-peers bench-s3 faults fuzz dist synth clean distclean

all: build

$(STAMPS):
	@mkdir -p $@

# ---- dependencies -----------------------------------------------------------------------------
# deps = the whole development toolchain (make test); demo takes deps-apt-run + deps-run only.
deps: deps-apt deps-py deps-node

deps-apt:
	@.ci/apt-ensure.sh $(APT_DEV)
deps-apt-run:
	@.ci/apt-ensure.sh $(APT_RUN)

$(PY):
	@.ci/venv.sh $(VENV)
venv: $(PY)

# The project is installed editable (the C loop built in place): runtime deps only, + the CDK libraries
# (synth), or everything the tests, lint and fuzzing use (dev, which includes the other two).
PY_SRC := pyproject.toml setup.py agent/cachewarm/__init__.py $(wildcard agent/cachewarm/datapath/*.c agent/cachewarm/datapath/*.h) $(wildcard dumper-cpp/hashkit/*.c dumper-cpp/hashkit/*.h dumper-cpp/core/*.c dumper-cpp/core/*.h)
# After apt: without python3-dev the C loop would be skipped quietly (setup.py marks it optional).
$(VENV)/.deps-run: $(PY_SRC) | $(PY) deps-apt-run
	$(SOURCE_BUILD) $(PIP_INSTALL) -e .
	@touch $@
$(VENV)/.deps-infra: $(PY_SRC) | $(PY) deps-apt-run
	$(SOURCE_BUILD) $(PIP_INSTALL) -e '.[infra]'
	@touch $@
$(VENV)/.deps-dev: $(PY_SRC) | $(PY) deps-apt
	$(SOURCE_BUILD) $(PIP_INSTALL) -e '.[dev]'
	@touch $@ $(VENV)/.deps-run $(VENV)/.deps-infra
deps-run: $(VENV)/.deps-run
deps-infra: $(VENV)/.deps-infra
deps-py: $(VENV)/.deps-dev

deps-apt-node:
	@command -v npm >/dev/null || .ci/apt-ensure.sh nodejs npm
$(STAMPS)/node: infra/package.json | $(STAMPS) deps-apt-node
	cd infra && npm ci --no-audit --no-fund --loglevel=error
	@touch $@
deps-node: $(STAMPS)/node

# ---- the dumper (C++) -------------------------------------------------------------------------
# Release build for use (the dumper and its tools for `vectors`, `bench` and the routing test; not the GoogleTest binary),
# and a test build with AddressSanitizer + UBSan of the GoogleTest suite only (ctest and tests/cli run
# that binary; nothing runs the sanitized dumper or tools, whose sources the release build compiles).
build: dumper dumper-asan
dumper: deps-apt-run
	cmake -S $(DUMPER_SRC) -B $(BUILD)/release -DCMAKE_BUILD_TYPE=Release -DCACHEWARM_TESTS=OFF >/dev/null
	cmake --build $(BUILD)/release -j$(JOBS) --target cachewarm-dump write_vectors ceiling_reader ceiling_writer ketama_route
dumper-asan: deps-apt
	cmake -S $(DUMPER_SRC) -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug -DCACHEWARM_SANITIZE=ON >/dev/null
	cmake --build $(BUILD)/asan -j$(JOBS) --target dumper_tests

# Regenerate the golden vectors with the real writer (data format v1 in tests/vectors/, v2 in
# tests/vectors/v2/, v3 in tests/vectors/v3/); a GoogleTest and tests/datapath/test_vectors.py check they match.
vectors: dumper
	rm -f tests/vectors/*.cwd tests/vectors/DONE tests/vectors/vectors.json
	rm -f tests/vectors/v2/*.cwd tests/vectors/v2/DONE tests/vectors/v2/vectors.json
	rm -f tests/vectors/v3/*.cwd tests/vectors/v3/DONE tests/vectors/v3/vectors.json
	$(BUILD)/release/write_vectors tests/vectors

# ---- memcached releases for the version matrix --------------------------------------------------
# 1.6.18 is Debian 12's package; the others are built from Debian's source packages (~30 s each, once)
# into build/memcached/<v>/memcached, where tests/conftest.py looks for them.
MEMCACHED_VERSIONS := 1.6.38 1.6.45
memcached-versions:
	@for v in $(MEMCACHED_VERSIONS); do tests/memcached/build.sh $$v $(BUILD) || exit 1; done

# ---- tests ------------------------------------------------------------------------------------
# make test: apt first and alone (apt takes a lock: one install at a time), then the rest in up to
# TEST_STEPS jobs at once, in the order the prerequisites allow: the two dumper builds, the memcached
# releases, pip, npm and the bundle side by side (pip and configure use one core, the builds both), lint
# as soon as pip is done, the GoogleTests as soon as their build is. A failing step still fails make
# test: make lets the steps already running finish (pytest too), then exits non-zero.
TEST_STEPS ?= 4
test:
	@$(MAKE) --no-print-directory deps-apt deps-apt-node venv
	@$(MAKE) --no-print-directory -j$(TEST_STEPS) test-steps
test-steps: lint test-cpp test-py

test-cpp: dumper-asan
	cd $(BUILD)/asan && ctest --output-on-failure -j$(JOBS)

# dist: tests/infra synthesize the stacks and the example app from the real bundle (the deploy path).
# The suite runs in TEST_WORKERS pytest-xdist processes (more than cores: most of a test's time is spent
# waiting on servers, subprocesses, TTLs and settle delays); tests/conftest.py keeps on one worker what
# shares a module's or a session's setup. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 6
# The project's bytecode first: where PYTHONDONTWRITEBYTECODE is set (as on the development host)
# Python never writes it, and each of the suite's hundreds of CLI and agent processes would compile
# the sources it imports again (`import cachewarm.cli`: 0.77 s CPU without it, 0.56 s with it).
test-py: deps-py deps-node build memcached-versions dist
	$(PY) -m compileall -q agent lambdas infra/cachewarm_infra >/dev/null
	$(IN_VENV) CACHEWARM_REQUIRE_SPEEDUPS=1 CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) -m pytest -q --durations=30 \
	  $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) tests

# The data-path tests on every memcached release alone (tests/conftest.py: MATRIX).
test-matrix: deps-py build memcached-versions
	$(IN_VENV) CACHEWARM_REQUIRE_SPEEDUPS=1 CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) -m pytest -q -m memcached_matrix tests

lint: deps-py
	$(PY) -m ruff check agent lambdas infra tests bench --extend-exclude infra/node_modules
	$(PY) -m ruff format --check agent lambdas infra tests bench

# ---- running ----------------------------------------------------------------------------------
demo: deps-apt-run deps-run dumper
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) -m cachewarm demo

bench: deps-apt-run deps-py dumper
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) bench/dump.py
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) bench/populate.py
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) bench/source_harm.py
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) bench/hot_first.py

# cachewarm against memcached's own mcdumpload (bench/peers.py): 1M x 1 KB and 100k x 10 KB, alternating
# runs, the defaults first (warm, warm --stream: the target check on), then the --no-check and --order
# crawl variants; medians, ratios, completeness, the check's share, CPU per process and the physical
# limit, as JSON (the table on stderr); ~5 min on a quiet machine with BENCH_RUNS=3. mcdumpload is not in this repository and nothing here
# fetches or builds it: build it yourself (git clone https://github.com/memcached/mcdumpload && make -C
# mcdumpload) and pass MCDUMPLOAD=/path/to/mcdumpload; without it the peer is skipped (and said so).
# It needs memcached 1.6.38 (`mgdump` without the OK line of >= 1.6.43): built by memcached-versions.
MCDUMPLOAD ?=
BENCH_RUNS ?= 3
bench-peers: deps-apt-run deps-py dumper memcached-versions
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) CACHEWARM_MEMCACHED_DIR=$(CURDIR)/$(BUILD)/memcached \
	  MCDUMPLOAD=$(MCDUMPLOAD) $(PY) bench/peers.py --runs $(BENCH_RUNS)

# S3 as the transport against the volume path (bench/s3_transport.py): warm time on 1M x 1 KB and
# 100k x 10 KB through moto's local S3, S3 requests per GB, the agents' peak RSS at two dump sizes; JSON
# into build/bench-s3.json. BENCH_SETS=20000x1000 for a smoke run.
bench-s3: deps-apt-run deps-py dumper
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) BENCH_RUNS=$(BENCH_RUNS) $(PY) bench/s3_transport.py \
	  | tee $(BUILD)/bench-s3.json

TRIALS ?= 20
# Fault scenarios with TRIALS trials each, on every memcached release (stream scenarios too); the closing
# table (one row per scenario and release) also goes to build/faults.md. RELEASES=1.6.45,... narrows it.
RELEASES ?=
faults: deps build memcached-versions
	$(IN_VENV) CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) FAULT_TRIALS=$(TRIALS) FAULT_REPORT=$(CURDIR)/$(BUILD)/faults.md \
	  CACHEWARM_STREAM_VERSIONS=all CACHEWARM_FAULT_RELEASES=all $(if $(RELEASES),CACHEWARM_MEMCACHED_VERSIONS=$(RELEASES)) \
	  $(PY) -m pytest -q -s --timeout=0 tests/faults

# Longer fuzzing runs (FUZZ_SECONDS per target); corpora are kept in build/fuzz/corpus between runs.
FUZZ_SECONDS ?= 300
fuzz: deps build
	$(IN_VENV) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_CORPUS_DIR=$(CURDIR)/$(BUILD)/fuzz/corpus \
	  $(PY) -m pytest -q -s --timeout=0 tests/fuzz

# ---- deployable artifacts (CDK assets) ----------------------------------------------------------
# build/dist/cachewarm-dump.tar.gz: the dumper binary; build/dist/cachewarm-agent.tar.gz: the agent
# wheel, its dependency wheels for x86_64/cp311 and requirements.txt locking each by SHA-256 (nodes
# install with --no-index --require-hashes: never from a package index);
# build/dist/cachewarm_cdk-<version>-py3-none-any.whl: the CacheWarmer construct for other CDK apps,
# with both tarballs, the ASL, the SSM documents and the Lambda code inside (infra/setup.py).
DIST := $(BUILD)/dist
dist: dumper venv
	@mkdir -p $(DIST)
	tar -C $(BUILD)/release -czf $(DIST)/cachewarm-dump.tar.gz cachewarm-dump
	rm -rf $(DIST)/agent && mkdir -p $(DIST)/agent
	$(SOURCE_BUILD) $(PY) -m pip wheel -q --disable-pip-version-check --no-deps -w $(DIST)/agent .
	$(PY) -c 'import tomllib;print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))' \
	  > $(DIST)/agent/deps.txt
	$(PY) -m pip download -q --disable-pip-version-check --only-binary=:all: --platform manylinux2014_x86_64 \
	  --python-version 3.11 --implementation cp -d $(DIST)/agent -r $(DIST)/agent/deps.txt
	rm -f $(DIST)/agent/deps.txt
	PYTHONPATH=infra $(PY) -m cachewarm_infra.wheelhouse $(DIST)/agent
	tar -C $(DIST)/agent -czf $(DIST)/cachewarm-agent.tar.gz .
	rm -f $(DIST)/cachewarm_cdk-*.whl
	CACHEWARM_DIST_DIR=$(CURDIR)/$(DIST) $(PY) -m pip wheel -q --disable-pip-version-check --no-deps -w $(DIST) ./infra

# CONTEXT: the context keys (docs/deploy.md), e.g. CONTEXT="-c destinationSecurityGroupIds=sg-… -c
# sourceSecurityGroupIds=sg-…" (the two groups are required; or set them in cdk.json's context).
CONTEXT ?=
synth: deps-infra deps-node dist
	$(IN_VENV) JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 infra/node_modules/.bin/cdk synth --quiet --no-notices $(CONTEXT)

clean:
	rm -rf $(BUILD) infra/cdk.out infra/build
# Also what the dependency steps installed into the checkout (.venv, infra/node_modules).
distclean: clean
	rm -rf $(VENV) infra/node_modules
