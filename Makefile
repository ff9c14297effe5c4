# The two entry points: `make demo` and `make test`. Both install what is
# missing (Debian packages), configure and build first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build demo test test-long sanitize fuzz-long install clean

all: build

deps:
	scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

# Every test: unit, integration, protocols, model checks, fuzzers (bounded),
# then the suite again under ASan+UBSan and the concurrency tests under TSan.
test: build
	cd $(BUILD) && ctest -j$(JOBS) --output-on-failure
	scripts/sanitize.sh

# Longer soak and fuzzing runs (not part of CI).
test-long: build
	COLLC_SOAK_SECONDS=1800 COLLC_FUZZ_SECONDS=600 scripts/sanitize.sh --long

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan
