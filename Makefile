# The two entry points: `make demo` and `make test`. Both install what is
# missing (Debian packages), configure and build first. When every package is
# installed nothing here needs root: scripts/install-deps.sh then only checks.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps deps-build build demo test test-long sanitize fuzz-long install clean

all: build

# deps before build, never two apt-get runs at once.
.NOTPARALLEL:

# Everything the tests and benchmarks need, or only what building needs.
deps:
	scripts/install-deps.sh all

deps-build:
	scripts/install-deps.sh build

build: deps-build
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

# Every test: unit, integration, protocols, model checks, fuzzers (bounded),
# then the suite again under ASan+UBSan and the concurrency tests under TSan.
test: deps build
	cd $(BUILD) && ctest -j$(JOBS) --output-on-failure
	scripts/sanitize.sh

# Longer soak and fuzzing runs (not part of CI).
test-long: deps build
	COLLC_SOAK_SECONDS=1800 COLLC_FUZZ_SECONDS=600 scripts/sanitize.sh --long

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan
