// Catch2 main for the unit test binary (no MPI in these tests).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
