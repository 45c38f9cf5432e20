#!/bin/sh
# Keeps the sources, docs, examples, tests and ChangeLog speaking to users: no
# words about how the project was developed (work periods, the machines it was
# measured on being lent, its own tracker's issue numbers).  Prints file:line for
# each hit and fails.  Upstream references stay allowed when spelled
# owner/repo#N (openucx/ucx#11705, NVIDIA/nccl#803) or as URLs, and so do the
# API's own barrier sessions (ncclLsaBarrierSession, "barrier session").
#
# Files: `git ls-files` in a git checkout of the sources, else (a release
# tarball, make distcheck) the source and text files found under top_srcdir.
set -u
LC_ALL=C
export LC_ALL
src=${top_srcdir:-$(dirname "$0")/../..}
src=$(cd "$src" && pwd) || exit 99
self=test/lint/wording.sh

ordinal='first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth'
# What is forbidden (extended regexps, case-insensitive), one per line.
forbidden="\\bsessions?\\b
\\b($ordinal)[- ](period|sitting)s?\\b
\\bwork[- ](period|round)s?\\b
\\bissues? #?[0-9]+
\\bissue's\\b
\\bpull requests? #?[0-9]+
\\btracker\\b
(^|[[:space:](,;])#[0-9]+\\b
\\blent\\b
\\bdevice[- ]time\\b
\\bdevice[[:space:]]tool\\b
gpu-kit
\\b(machine|GPU) kinds?\\b"
# What may stand where a forbidden pattern would otherwise match; removed from
# a line before it is matched again.
allowed="[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#[0-9]+
https?://[^[:space:]<>)\`\"']+
\\b(lsa |gin |multimem )?barrier sessions?\\b
scope *= *[\"']session[\"']"

any=$(printf '%s\n' "$forbidden" | paste -s -d '|' -)
strip=$(printf '%s\n' "$allowed" | paste -s -d '|' -)

cd "$src" || exit 99
list=$(mktemp) || exit 99
trap 'rm -f "$list"' EXIT
if top=$(git rev-parse --show-toplevel 2>/dev/null) && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
    git ls-files > "$list" || exit 99
else
    find . \( -name .git -o -name autom4te.cache -o -name .deps -o -name .libs \
              -o -name '_build' -o -name '_inst' -o -name '__pycache__' \
              -o -path './build*' \) -prune -o -type f \
         \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' \
            -o -name '*.sh' -o -name '*.am' -o -name '*.ac' -o -name '*.md' -o -name '*.f90' \
            -o -name '*.def' -o -name '*.toml' -o -name '*.txt' -o -name '*.pc.in' -o -name '*.sh.in' \
            -o -name ChangeLog -o -name README \) -print |
        sed 's|^\./||' > "$list" || exit 99
    # build-aux holds autotools' own scripts but for this one of ours
    [ -f build-aux/nvcc-libtool ] && echo build-aux/nvcc-libtool >> "$list"
fi
[ -s "$list" ] || { echo "wording.sh: no files to check under $src"; exit 99; }

hits=$(grep -v -x -F "$self" "$list" | tr '\n' '\0' |
    xargs -0 grep -I -n -H -i -E "$any" /dev/null 2>/dev/null |
    while IFS= read -r hit; do
        file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
        printf '%s\n' "$text" | sed -E "s%$strip%%gI" | grep -q -i -E "$any" &&
            printf '%s:%s: %s\n' "$file" "$line" "$text"
    done)
if [ -n "$hits" ]; then
    printf '%s\n' "$hits"
    echo "wording.sh: $(printf '%s\n' "$hits" | wc -l) line(s) above speak of how mpccl was developed"
    echo "(work periods, lent machines or device time, tracker issue numbers); say it for a user:"
    echo "dated measurements, owner/repo#N or a URL for upstream issues."
    exit 1
fi
echo "wording.sh: $(wc -l < "$list") files checked, nothing found"
exit 0
