// Catch2 main for the multi-rank tests (they start mpirun themselves).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
