# memcached's own test suite (t/*.t of the source package) against the three
# servers, through run_suite.sh. ctest runs the core (run_suite.sh --core,
# about two minutes a server); `make test-memcached` runs every file.
# Included from tests/memcached/CMakeLists.txt. Exit code 77 (binary or
# source tree not built) is reported as skipped.
find_program(MC_SUITE_PERL perl)
if(MC_SUITE_PERL)
  foreach(mc_bin memcached-vanilla loom-memcached memcached-tpc)
    add_test(NAME memcached_suite_core_${mc_bin}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/run_suite.sh ${mc_bin} --core
                     --port-dir ${CMAKE_BINARY_DIR}/memcached-port)
    set_tests_properties(memcached_suite_core_${mc_bin} PROPERTIES
                         LABELS memcached TIMEOUT 400 SKIP_RETURN_CODE 77)
  endforeach()
endif()
