#!/bin/sh
# A compute-sanitizer that never finishes, for the dry run: the memory check
# must end at its limit and be counted as inconclusive, not failed or passed.
echo "========= COMPUTE-SANITIZER stand-in (tests/gpu-pack): never finishes"
exec sleep 3600
