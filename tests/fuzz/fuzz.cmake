# fuzz.cmake — tensor files for the CLI: cJSON linkage of the tools that read
# safetensors, the tensor_io unit test, the corpus replay (always) and the libFuzzer
# runs (only where clang with -fsanitize=fuzzer works). Included at the end of the
# top-level CMakeLists.txt.

find_path(MXF_CJSON_INCLUDE cjson/cJSON.h)
find_library(MXF_CJSON_LIB NAMES cjson)
if(NOT MXF_CJSON_INCLUDE OR NOT MXF_CJSON_LIB)
  message(FATAL_ERROR "mxfuse: the CLI reads safetensors headers with cJSON; install libcjson-dev")
endif()

set(MXF_TENSOR_IO_SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/tools/npy.c
    ${CMAKE_CURRENT_SOURCE_DIR}/tools/safetensors.c
    ${CMAKE_CURRENT_SOURCE_DIR}/tools/tensor_io.c)
set(MXF_TENSOR_IO_INCLUDES
    ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src
    ${CMAKE_CURRENT_SOURCE_DIR}/tools ${MXF_CJSON_INCLUDE})

# The CLI already compiles tools/*.c; it only needs the library.
target_include_directories(mxfuse_cli PRIVATE ${MXF_CJSON_INCLUDE})
target_link_libraries(mxfuse_cli PRIVATE ${MXF_CJSON_LIB})

# tests/test_tensor_io.c tests the tools' readers, which are not part of libmxfuse.
if(TARGET test_tensor_io)
  target_sources(test_tensor_io PRIVATE ${MXF_TENSOR_IO_SOURCES})
  target_include_directories(test_tensor_io PRIVATE ${MXF_TENSOR_IO_INCLUDES})
  target_link_libraries(test_tensor_io PRIVATE ${MXF_CJSON_LIB})
endif()

# ---------------------------------------------------------------- corpus replay
foreach(fmt npy safetensors file)
  add_executable(fuzz_replay_${fmt} tests/fuzz/replay_main.c tests/fuzz/fuzz_${fmt}.c ${MXF_TENSOR_IO_SOURCES})
  target_include_directories(fuzz_replay_${fmt} PRIVATE ${MXF_TENSOR_IO_INCLUDES})
  target_compile_options(fuzz_replay_${fmt} PRIVATE ${MXF_WARN})
  target_link_libraries(fuzz_replay_${fmt} PRIVATE ${MXF_CJSON_LIB} m)
  add_test(NAME fuzz_replay_${fmt}
           COMMAND fuzz_replay_${fmt} ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/corpus/${fmt})
  set_tests_properties(fuzz_replay_${fmt} PROPERTIES LABELS cpu TIMEOUT 120)
endforeach()

# ---------------------------------------------------------------- libFuzzer
option(MXF_FUZZ "Run the libFuzzer targets as tests when clang supports them" ON)
set(MXF_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz test runs")
find_program(MXF_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
set(MXF_HAVE_LIBFUZZER OFF)
if(MXF_FUZZ AND MXF_CLANG)
  set(_probe_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz-probe)
  file(MAKE_DIRECTORY ${_probe_dir})
  file(WRITE ${_probe_dir}/probe.c
       "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${MXF_CLANG} -fsanitize=fuzzer,address ${_probe_dir}/probe.c -o ${_probe_dir}/probe
                  RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(_probe_rc EQUAL 0)
    set(MXF_HAVE_LIBFUZZER ON)
  endif()
endif()

if(MXF_HAVE_LIBFUZZER)
  message(STATUS "mxfuse: libFuzzer found (${MXF_CLANG}); fuzz tests run ${MXF_FUZZ_SECONDS} s each")
  set(_inc_flags)
  foreach(d ${MXF_TENSOR_IO_INCLUDES})
    list(APPEND _inc_flags -I${d})
  endforeach()
  foreach(fmt npy safetensors file)
    set(_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_${fmt})
    add_custom_command(
      OUTPUT ${_bin}
      COMMAND ${MXF_CLANG} -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined ${_inc_flags}
              ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/fuzz_${fmt}.c ${MXF_TENSOR_IO_SOURCES}
              ${MXF_CJSON_LIB} -lm -o ${_bin}
      DEPENDS tests/fuzz/fuzz_${fmt}.c ${MXF_TENSOR_IO_SOURCES} tools/tensor_io.h
      COMMENT "Building libFuzzer target fuzz_${fmt}")
    add_custom_target(fuzz_${fmt}_bin ALL DEPENDS ${_bin})
    # New inputs go to a scratch corpus in the build tree; the saved corpus is read only.
    # Crashes land in fuzz-artifacts/; copy them to tests/fuzz/corpus/${fmt}/ once fixed.
    add_test(NAME fuzz_${fmt}
             COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
                     ${CMAKE_COMMAND} -DBIN=${_bin} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/fuzz-work/${fmt}
                     -DSEEDS=${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/corpus/${fmt}
                     -DARTIFACTS=${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts/
                     -DSECONDS=${MXF_FUZZ_SECONDS}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/run_fuzzer.cmake)
    set_tests_properties(fuzz_${fmt} PROPERTIES LABELS fuzz TIMEOUT 300)
  endforeach()
else()
  message(STATUS "mxfuse: clang with libFuzzer not found; fuzz tests not added (corpus replay still runs)")
endif()
