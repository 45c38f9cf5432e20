#!/bin/sh
# The folder-level import graph of lib/: which folder includes another's
# headers or names another's functions.  Read from the sources (comments
# stripped), so it needs no build.  doc/MAP.md explains the layers and
# test/unit/check-layers.sh holds them to it, from the same edges.
#
#   import-graph.sh            folder -> folder, with how many includes and names
#   import-graph.sh -e         every edge: KIND FROM-FOLDER TO-FOLDER FROM-FILE WHAT
#                              (KIND is include or call; WHAT the header or the function)
#
# A function belongs to the folder whose source defines it without `static`;
# a file that names it (a call, or a pointer in a table) depends on that folder.
set -u
src=$(cd "${top_srcdir:-$(dirname "$0")/../..}" && pwd)
mode=summary
[ "${1:-}" = "-e" ] && mode=edges
cd "$src" || exit 99
[ -d lib/core ] || { echo "no lib/core under $src" >&2; exit 99; }

# Every source with its comments removed, each led by a "@@FILE path" line.
strip_all() {
    for f in lib/*/*.c lib/*/*.h lib/*/*.cu lib/*/*.cuh; do
        [ -f "$f" ] || continue
        echo "@@FILE $f"
        gcc -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null
    done
}

strip_all | awk -v mode="$mode" '
function folder(path,   p) { split(path, p, "/"); return p[2] }
/^@@FILE / { file = $2; nfiles++; files[nfiles] = file; folders[folder(file)] = 1; next }
{ line[file, ++nl[file]] = $0 }
# A definition: at the start of a line, not static, a name and "(" and no ";".
/^(extern "C" )?[A-Za-z_][A-Za-z0-9_ \*]*[ \*][A-Za-z_][A-Za-z0-9_]*\(/ &&
    !/^(static|typedef|extern [^"]|#|return)/ && !/;[[:space:]]*$/ {
    s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ \*]+/); name = w[n]
    if (file ~ /\.(c|cu)$/ && name != "") {
        if ((name in def) && folder(def[name]) != folder(file)) dup[name] = 1
        def[name] = file
    }
}
END {
    for (i = 1; i <= nfiles; i++) {
        f = files[i]; ff = folder(f)
        for (j = 1; j <= nl[f]; j++) {
            l = line[f, j]
            if (l ~ /^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+\//) {
                h = l; sub(/^[^"]*"/, "", h); sub(/".*/, "", h)
                hf = h; sub(/\/.*/, "", hf)
                if (hf != ff && (hf in folders)) edge("include", ff, hf, f, "lib/" h)
                continue
            }
            if (l ~ /^[[:space:]]*#/) continue
            gsub(/"([^"\\]|\\.)*"/, "", l)
            while (match(l, /[A-Za-z_][A-Za-z0-9_]*/)) {
                t = substr(l, RSTART, RLENGTH); l = substr(l, RSTART + RLENGTH)
                if (t == "struct" || t == "union" || t == "enum") { tag = 1; continue }
                if (tag) { tag = 0; continue } # a tag names a type, not a function
                if ((t in def) && !(t in dup) && folder(def[t]) != ff && !((f, t) in seen)) {
                    seen[f, t] = 1
                    edge("call", ff, folder(def[t]), f, t)
                }
            }
        }
    }
    if (mode == "summary")
        for (k in pair) { split(k, p, SUBSEP); printf "%-10s -> %-10s %3d include %3d call\n", p[1], p[2], ninc[k] + 0, ncall[k] + 0 }
}
function edge(kind, a, b, f, what) {
    if (mode == "edges") print kind, a, b, f, what
    else { pair[a, b] = 1; if (kind == "include") ninc[a, b]++; else ncall[a, b]++ }
}
' | sort -u
