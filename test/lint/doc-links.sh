#!/bin/sh
# Checks that the docs point at files that exist: every relative link
# ([text](path) or ![alt](path)) in a *.md file must resolve from that file's
# folder, and every doc/NAME.md named in prose (in backquotes too) must exist.
# Links to web addresses and to anchors in the same page are not checked, nor
# are code blocks or links inside inline code.  Prints file:line for each
# broken one and fails.
#
# Files: `git ls-files '*.md'` in a git checkout of the sources, else (a
# release tarball, make distcheck) the *.md files found under top_srcdir.
set -u
LC_ALL=C
export LC_ALL
src=${top_srcdir:-$(dirname "$0")/../..}
src=$(cd "$src" && pwd) || exit 99
cd "$src" || exit 99

list=$(mktemp) || exit 99
trap 'rm -f "$list"' EXIT
if top=$(git rev-parse --show-toplevel 2>/dev/null) && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
    git ls-files '*.md' > "$list" || exit 99
else
    find . \( -name .git -o -name autom4te.cache -o -name '_build' -o -name '_inst' \
              -o -path './build*' \) -prune -o -type f -name '*.md' -print |
        sed 's|^\./||' > "$list" || exit 99
fi
[ -s "$list" ] || { echo "doc-links.sh: no *.md files under $src"; exit 99; }

# One line per reference: file <TAB> line <TAB> kind <TAB> target.  Fenced
# (```) and indented (4 spaces, tab) code is skipped.
refs=$(while IFS= read -r f; do
    awk -v f="$f" '
        /^[ \t]*```/ { fence = !fence; next }
        fence || /^(    |\t)/ { next }
        {
            s = $0
            gsub(/`[^`]*`/, "", s)               # a link in inline code is no link
            while (match(s, /\]\([^)[:space:]]+\)/)) {
                t = substr(s, RSTART + 2, RLENGTH - 3)
                printf "%s\t%d\tlink\t%s\n", f, NR, t
                s = substr(s, RSTART + RLENGTH)
            }
            s = $0
            gsub(/\]\([^)]*\)/, "]", s)          # the link targets were checked above
            gsub(/[A-Za-z0-9_.-]+\/doc\//, "", s) # another tree'"'"'s doc/ folder
            while (match(s, /doc\/[A-Za-z0-9_-]+\.md/)) {
                printf "%s\t%d\tname\t%s\n", f, NR, substr(s, RSTART, RLENGTH)
                s = substr(s, RSTART + RLENGTH)
            }
        }' "$f"
done < "$list")

bad=$(printf '%s\n' "$refs" | while IFS="$(printf '\t')" read -r f n kind t; do
    [ -n "$f" ] || continue
    case $t in
        http://*|https://*|mailto:*|ftp://*|\#*) continue ;;
    esac
    path=${t%%#*}
    [ -n "$path" ] || continue
    if [ "$kind" = link ]; then
        case $path in
            /*) where=$path ;;
            *) where=$(dirname "$f")/$path ;;
        esac
    else
        where=$path
    fi
    [ -e "$where" ] || printf '%s:%s: %s (%s)\n' "$f" "$n" "$t" "$where"
done)
if [ -n "$bad" ]; then
    printf '%s\n' "$bad"
    echo "doc-links.sh: $(printf '%s\n' "$bad" | wc -l) reference(s) above point at no file"
    exit 1
fi
echo "doc-links.sh: $(wc -l < "$list") files, $(printf '%s\n' "$refs" | grep -c .) references checked, all resolve"
exit 0
