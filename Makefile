# Thin wrapper over CMake: `make demo` runs the main job, `make test` runs the tests.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build demo test bench bench-cpu gpu-check clean format

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/mxfuse demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench-cpu: build
	./$(BUILD)/mxf_bench_cpu

bench: bench-cpu

clean:
	rm -rf $(BUILD)

format:
	clang-format -i include/*.h src/*.h src/*/*.[ch] src/cuda/*/*.cu src/cuda/*.cu tools/*.[ch] tests/*.c tests/*/*.[ch] bench/*.c 2>/dev/null || true
