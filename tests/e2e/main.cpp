// Catch2 main for the end-to-end tests of the syncopt binary.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
