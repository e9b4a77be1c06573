# cachewarm — one entry point for building, testing and running.
#   make demo    the main job on the embedded default: a local warm between two local memcacheds
#   make test    everything CI runs (installs what it needs first)
SHELL := /bin/bash
PY ?= python3
JOBS ?= 2
DUMPER_SRC := dumper-cpp
BUILD := build
DUMPER := $(BUILD)/release/cachewarm-dump
APT_PKGS := memcached libxxhash-dev xxhash cmake g++ make libgtest-dev googletest clang xfsprogs
# Stamps keep re-runs fast; they live in build/ (ignored by git).
STAMPS := $(BUILD)/.stamps

.PHONY: all deps deps-apt deps-py deps-node build dumper vectors test test-cpp test-py lint demo bench faults fuzz dist synth clean

all: build

$(STAMPS):
	@mkdir -p $@

# ---- dependencies -----------------------------------------------------------------------------
deps: deps-apt deps-py deps-node

deps-apt: | $(STAMPS)
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMPS)/py: pyproject.toml setup.py agent/cachewarm/datapath/_speedups.c | $(STAMPS)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@
deps-py: $(STAMPS)/py

$(STAMPS)/node: infra/package.json | $(STAMPS)
	cd infra && npm ci --no-audit --no-fund --loglevel=error
	@touch $@
deps-node: $(STAMPS)/node

# ---- the dumper (C++) -------------------------------------------------------------------------
# Release build for use, and a test build with AddressSanitizer + UBSan for the GoogleTest suite.
build: dumper
dumper: deps-apt
	cmake -S $(DUMPER_SRC) -B $(BUILD)/release -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD)/release -j$(JOBS)
	cmake -S $(DUMPER_SRC) -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug -DCACHEWARM_SANITIZE=ON >/dev/null
	cmake --build $(BUILD)/asan -j$(JOBS)

# Regenerate the golden vectors (tests/vectors/) with the real writer; a GoogleTest checks they match.
vectors: dumper
	rm -f tests/vectors/*.cwd tests/vectors/DONE tests/vectors/vectors.json
	$(BUILD)/release/write_vectors tests/vectors

# ---- tests ------------------------------------------------------------------------------------
test: deps build lint test-cpp test-py

test-cpp: build
	cd $(BUILD)/asan && ctest --output-on-failure -j$(JOBS)

test-py: deps-py deps-node build
	CACHEWARM_REQUIRE_SPEEDUPS=1 CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) -m pytest -q tests

lint: deps-py
	$(PY) -m ruff check agent lambdas infra tests bench --extend-exclude infra/node_modules
	$(PY) -m ruff format --check agent lambdas infra tests bench

# ---- running ----------------------------------------------------------------------------------
demo: deps-apt deps-py build
	CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) PYTHONPATH=$(CURDIR)/agent $(PY) -m cachewarm demo

bench: deps-apt deps-py build
	CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) bench/dump.py
	CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) $(PY) bench/populate.py

TRIALS ?= 20
# Fault scenarios with TRIALS trials each; the closing table also goes to build/faults.md.
faults: deps build
	CACHEWARM_DUMP=$(CURDIR)/$(DUMPER) FAULT_TRIALS=$(TRIALS) FAULT_REPORT=$(CURDIR)/$(BUILD)/faults.md \
	  $(PY) -m pytest -q -s --timeout=0 tests/faults

# Longer fuzzing runs (FUZZ_SECONDS per target); corpora are kept in build/fuzz/corpus between runs.
FUZZ_SECONDS ?= 300
fuzz: deps build
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_CORPUS_DIR=$(CURDIR)/$(BUILD)/fuzz/corpus \
	  $(PY) -m pytest -q -s --timeout=0 tests/fuzz

# ---- deployable artifacts (CDK assets) ----------------------------------------------------------
# build/dist/cachewarm-dump.tar.gz: the dumper binary; build/dist/cachewarm-agent.tar.gz: the agent
# wheel (+ its dependency wheels for x86_64/cp311 with DIST_WHEELHOUSE=1, for subnets without PyPI).
DIST := $(BUILD)/dist
dist: dumper deps-py
	@mkdir -p $(DIST)
	tar -C $(BUILD)/release -czf $(DIST)/cachewarm-dump.tar.gz cachewarm-dump
	rm -rf $(DIST)/agent && mkdir -p $(DIST)/agent
	$(PY) -m pip wheel -q --disable-pip-version-check --no-deps -w $(DIST)/agent .
	if [ -n "$(DIST_WHEELHOUSE)" ]; then \
	  $(PY) -c 'import tomllib;print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))' \
	    > $(DIST)/agent/requirements.txt && \
	  $(PY) -m pip download -q --disable-pip-version-check --only-binary=:all: --platform manylinux2014_x86_64 \
	    --python-version 3.11 --implementation cp -d $(DIST)/agent -r $(DIST)/agent/requirements.txt; \
	fi
	tar -C $(DIST)/agent -czf $(DIST)/cachewarm-agent.tar.gz .

synth: deps-py deps-node dist
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 infra/node_modules/.bin/cdk synth --quiet --no-notices

clean:
	rm -rf $(BUILD) infra/cdk.out
