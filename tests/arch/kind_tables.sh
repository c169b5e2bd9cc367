#!/usr/bin/env bash
# The per-kind tables (nn/layer.cpp, lib/nn/cpu/kinds.cpp,
# cuda/src/network/kinds.cpp) static_assert nn::in_layer_type_order: a kind
# inserted mid-enum, or added without its row, must stop the build. This
# compiles a table in order (must build) and the two mistakes (must not).
# Usage: kind_tables.sh CXX SOURCE_DIR
set -euo pipefail
cxx=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compile() {  # $1: the rows; builds or not
  cat >"$work/t.cpp" <<CPP
#include "nn/layer.hpp"
using namespace syncopt::nn;
struct Row { LayerType type; };
constexpr std::array<Row, $2> kRows = {{ $1 }};
static_assert(in_layer_type_order(kRows), "out of LayerType order");
int main() {}
CPP
  "$cxx" -std=c++20 -fsyntax-only -I"$src/lib" "$work/t.cpp" 2>"$work/err"
}
rows=""
count=0
for t in kConv kBatchNorm kRelu kAdd kMaxPool kAvgPool kGlobalAvgPool kFc kDropout kFlatten kGelu; do
  rows+="{LayerType::$t},"
  count=$((count + 1))
done
grep -q "kGelu, *//" "$src/lib/nn/layer.hpp" || { echo "kind_tables: update this test's list of kinds" >&2; exit 1; }
if ! compile "$rows" "kLayerTypeCount"; then
  echo "kind_tables: a table in LayerType order does not build:" >&2
  cat "$work/err" >&2
  exit 1
fi
swapped=${rows/\{LayerType::kRelu\},\{LayerType::kAdd\},/\{LayerType::kAdd\},\{LayerType::kRelu\},}
if compile "$swapped" "kLayerTypeCount"; then
  echo "kind_tables: a table with two kinds swapped builds" >&2
  exit 1
fi
short=${rows%\{LayerType::kGelu\},}
if compile "$short" "kLayerTypeCount - 1"; then
  echo "kind_tables: a table without the last kind builds" >&2
  exit 1
fi
echo "kind_tables: in order builds; swapped and missing rows do not ($count kinds)"
