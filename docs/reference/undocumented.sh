#!/bin/bash
# undocumented.sh WARNINGS_LOG: the public functions Doxygen found without documentation, one
# per line (file:line: the function), and their count; exit 1 when there is any.
set -uo pipefail
log=$1
[[ -f $log ]] || { echo "no $log: build the doc target first"; exit 2; }
list=$(grep -E "warning: Member .*\((function|friend)\) .* is not documented" "$log" |
       sed -E 's#^.*/include/##; s#: warning: Member (.*) \((function|friend)\) of (.*) is not documented\.#: \3: \1#') ||
    { [[ $? == 1 ]] || { echo "undocumented.sh: could not read $log"; exit 2; }; }
n=$(printf '%s' "$list" | grep -c . || true)
if ((n)); then
    printf '%s\n' "$list"
    echo "$n public functions are not documented"
    exit 1
fi
echo "every public function is documented"
