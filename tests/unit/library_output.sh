#!/bin/bash
# library_output.sh SOURCE_DIR: the libraries (vfio, dma, drivers, transport, api) write nothing
# to stdout or stderr themselves — what they have to say goes through vfab::log (vfab/log.hpp),
# whose stderr handler (vfio/log.cpp) is the one place allowed to. Fails naming each other place.
set -uo pipefail
cd "$1" || exit 2
pattern='\b(f?printf|fputs|puts|putchar|perror|std::print) *\(|std::(cerr|cout|clog)\b|\bwrite\((1|2|STDOUT_FILENO|STDERR_FILENO),'
hits=$(grep -rnE --include='*.cpp' --include='*.hpp' --include='*.h' --include='*.c' "$pattern" \
       vfio dma drivers transport api include/vfab | grep -v '^vfio/log.cpp:' |
       grep -vE '^[^:]+:[0-9]+: *(//|\*|/\*)')   # comments and examples in them
if [[ -n $hits ]]; then
    echo "FAIL: library code writing to stdout/stderr (use vfab::log, vfab/log.hpp):"
    echo "$hits"
    exit 1
fi
echo "ok: only vfio/log.cpp's stderr handler writes to stderr"
