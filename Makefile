# Thin wrapper over CMake. On a fresh Debian 12 machine:
#   make demo   installs what the build needs and is missing, builds, runs `mxfuse demo`
#   make test   installs what the tests need and is missing, builds, runs every test (ctest)
# scripts/deps.sh does the installing (`DEPS=:` skips it); `make build` only builds.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON ?= python3
CMAKE_FLAGS ?=
DEPS ?= scripts/deps.sh

.PHONY: all build demo test deps-build deps-test bench bench-cpu gpu-check perf-tables clean format

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DPython3_EXECUTABLE=$$(command -v $(PYTHON) || echo $(PYTHON)) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

deps-build:
	@$(DEPS) build

deps-test:
	@PYTHON=$(PYTHON) $(DEPS) test

demo: deps-build
	@$(MAKE) --no-print-directory build
	./$(BUILD)/mxfuse demo

test: deps-test
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench-cpu: build
	./$(BUILD)/mxf_bench_cpu

bench: bench-cpu

# the whole check on a machine with an NVIDIA GPU (its own build directory, build-gpu)
gpu-check:
	scripts/gpu-check.sh

# docs/performance.md's figure tables from bench/results/*.json
perf-tables:
	$(PYTHON) scripts/perf_tables.py

clean:
	rm -rf $(BUILD)

format:
	clang-format -i include/*.h src/*.h src/*/*.[ch] src/cuda/*/*.cu src/cuda/*.cu tools/*.[ch] tests/*.c tests/*/*.[ch] bench/*.c 2>/dev/null || true
