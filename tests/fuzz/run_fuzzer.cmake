# run_fuzzer.cmake — one bounded libFuzzer run (ctest calls it with -P):
# BIN (the fuzzer), WORK (scratch corpus), SEEDS (saved corpus), ARTIFACTS, SECONDS.
file(MAKE_DIRECTORY ${WORK} ${ARTIFACTS})
execute_process(
  COMMAND ${BIN} -max_total_time=${SECONDS} -max_len=65536 -rss_limit_mb=2048 -timeout=10
          -print_final_stats=1 -artifact_prefix=${ARTIFACTS} ${WORK} ${SEEDS}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzzer ${BIN} failed (exit ${rc}); the input is in ${ARTIFACTS}")
endif()
