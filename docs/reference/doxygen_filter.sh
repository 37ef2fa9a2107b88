#!/bin/sh
# Doxygen input filter: vfab's public headers document their declarations with plain `//`
# comments above them (and `// ...` after a member); Doxygen reads only `///`. This turns a
# comment line into a doc-comment line and a trailing comment into `///<`, leaving the headers
# themselves as they are.
exec sed -e 's|^\([[:space:]]*\)//\([^/]\)|\1///\2|' -e 's|^\([[:space:]]*\)//$|\1///|' \
         -e 's|\([;,{]\)[[:space:]]*//[[:space:]]|\1 ///< |' "$1"
