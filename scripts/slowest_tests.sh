#!/usr/bin/env bash
# The N slowest tests of the last ctest run in a build folder, slowest first, from ctest's own
# log (Testing/Temporary/LastTest.log).
#   scripts/slowest_tests.sh [build-dir] [N]
set -euo pipefail
build=${1:-build}
n=${2:-10}
log=$build/Testing/Temporary/LastTest.log
[[ -f $log ]] || { echo "no $log: run ctest in $build first" >&2; exit 1; }
# The last stage reads all its input (head would close the pipe early, and pipefail would then
# report sort's SIGPIPE as a failure).
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
     /^Test time = / { printf "%9.2f s  %s\n", $4, name }' "$log" | sort -rn | awk -v n="$n" 'NR <= n'
