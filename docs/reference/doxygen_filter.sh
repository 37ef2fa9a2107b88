#!/bin/sh
# Doxygen input filter: vfab's public headers document their declarations with plain `//`
# comments above them (and `// ...` after a member); Doxygen reads only `///`. This turns a
# comment line into a doc-comment line and a trailing comment into `///<`, leaving the headers
# themselves as they are. Not turned into documentation:
#  - comments inside an inline function's body (they explain the code, and Doxygen would take
#    them as the function's documentation, hiding a function that has none);
#  - section banners (`// ---- virtio-net (§5.1) ----`), which would become the next
#    declaration's summary.
exec awk '
function strip(s) {   # the line without string/char literals and comments, for brace counting
    gsub(/\\./, "", s); gsub(/"[^"]*"/, "", s); gsub(/'"'"'[^'"'"']*'"'"'/, "", s); sub(/\/\/.*/, "", s)
    return s
}
{
    line = $0
    code = strip(line)
    if (body == 0) {
        if (line ~ /^[[:space:]]*\/\/[[:space:]]*(---|===)/) {
            # a banner: stays a plain comment
        } else if (line ~ /^[[:space:]]*\/\/[^\/]/ || line ~ /^[[:space:]]*\/\/$/) {
            sub(/\/\//, "///", line)
        } else if (match(line, /[;,{}][[:space:]]*\/\/[[:space:]]/)) {
            line = substr(line, 1, RSTART) " ///< " substr(line, RSTART + RLENGTH)
        }
    }
    # Entering a function body: a brace opened after a parameter list, outside any body.
    opens = gsub(/[{]/, "{", code); closes = gsub(/[}]/, "}", code)
    if (body == 0 && opens > closes && code ~ /\)[^{]*[{][^}]*$/ && code !~ /^[[:space:]]*(namespace|class|struct|union|enum|extern)/)
        body = opens - closes
    else if (body > 0)
        body += opens - closes
    if (body < 0) body = 0
    print line
}' "$1"
