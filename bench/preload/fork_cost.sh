#!/bin/sh
# fork_cost.sh - what FollowFork costs a host's fork() (#31 F13): a program forks N
# children one after the other, each calling exit(0) at once; modes interleaved per
# round: without memtrim, memtrim with FollowFork and a port (a worker group, no store:
# Database null), and the same with a store. With a second build dir, its library runs
# beside the first in each round (before/after). Prints the median wall and CPU seconds
# (user + sys: the host's threads and its children) per mode over R rounds.
# Usage: bench/preload/fork_cost.sh [build dir] [N] [R] [other build dir]
set -eu
build=${1:-build}
n=${2:-500}
rounds=${3:-5}
other=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/fork_exit" "$here/fork_exit.c"
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run() { # mode name, library or "", Database value (JSON)
    if [ -z "$2" ]; then
        r=$("$tmp/fork_exit" "$n")
    else
        rm -f "$tmp"/s.sqlite*
        r=$(LD_PRELOAD="$2" MEMTRIM_CONFIG="{\"HttpPort\": $(port), \"FollowFork\": true, \"Database\": $3}" \
            "$tmp/fork_exit" "$n" 2>/dev/null)
    fi
    echo "$1 $r" >>"$tmp/all"
}
echo "load: $(cat /proc/loadavg)"
libs="$(cd "$build" && pwd)/libmemtrim.so"
[ -n "$other" ] && libs="$libs $(cd "$other" && pwd)/libmemtrim.so"
for r in $(seq "$rounds"); do
    run none "" null
    for lib in $libs; do
        b=$(basename "$(dirname "$lib")")
        run "group($b)" "$lib" null
        run "store($b)" "$lib" "\"$tmp/s.sqlite\""
    done
done
echo "load: $(cat /proc/loadavg)"
sort -k1,1 -s "$tmp/all" | awk -v n="$n" -v r="$rounds" '
    function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
                                       if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                   return a[int((k + 1) / 2)] }
    $1 != m { if (m != "") out(); m = $1; k = 0 }
    { k++; w[k] = $2; c[k] = $3 }
    function out() { printf "%-24s wall %7.3f s  CPU %7.3f s  (median of %d rounds of %d fork/exit)\n", m, med(w, k), med(c, k), k, n }
    END { out() }'
