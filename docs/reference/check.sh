#!/bin/bash
# check.sh DOXYFILE OUTDIR: runs Doxygen over the public headers as the doc target does, but
# writing only its warnings (into OUTDIR), and fails when a public function has no
# documentation (undocumented.sh lists them). The ctest test unit.api_reference.
set -uo pipefail
doxyfile=$1 out=$2
command -v doxygen >/dev/null || { echo "doxygen is not installed: scripts/setup installs it"; exit 1; }
mkdir -p "$out"
{ cat "$doxyfile"
  echo "OUTPUT_DIRECTORY = $out"
  echo "WARN_LOGFILE = $out/warnings.log"
  echo "GENERATE_HTML = NO"
  echo "GENERATE_MAN = NO"
  echo "GENERATE_XML = YES"; } | doxygen - >"$out/doxygen.log" 2>&1 || { cat "$out/doxygen.log"; exit 1; }
exec "$(dirname "$0")/undocumented.sh" "$out/warnings.log"
