#!/bin/sh
# exec_cost.sh - what LD_PRELOAD=libmemtrim.so costs each process a host
# starts (a helper per request, a shell loop): bash runs /bin/true N times,
# R rounds per mode; prints the median CPU time (user + sys, from
# /usr/bin/time) per /bin/true, so other load on the machine matters less
# than wall time would. Modes: without the library; the library without
# MEMTRIM_CONFIG; memtrim in bash and each /bin/true finding bash's port
# (the ancestor check); Program naming another program (the glob test).
# Usage: bench/preload/exec_cost.sh [build dir] [N] [R]   (port 19390: issue 16's range)
set -eu
build=${1:-build}
n=${2:-200}
rounds=${3:-5}
lib=$(cd "$build" && pwd)/libmemtrim.so
port=19390
loop="for i in \$(seq $n); do /bin/true; done"

one() { # prints user+sys seconds of one round
    /usr/bin/time -f "%U %S" -o /tmp/exec_cost.$$ "$@" bash -c "$loop" 2>/dev/null
    awk '{print $1 + $2}' /tmp/exec_cost.$$
}
mode() { # name, then the env assignments
    name=$1
    shift
    for r in $(seq "$rounds"); do one env "$@"; done | sort -n |
        awk -v name="$name" -v n="$n" '{v[NR] = $1} END {
            printf "%-24s %6.2f ms CPU per exec (median of %d rounds of %d)\n",
                   name, v[int((NR + 1) / 2)] * 1000 / n, NR, n }'
}
echo "load: $(cat /proc/loadavg)"
mode "no library"
mode "library, no config" LD_PRELOAD="$lib"
mode "ancestor holds port" LD_PRELOAD="$lib" MEMTRIM_CONFIG="{\"HttpPort\": $port, \"Database\": \"\"}"
mode "Program does not match" LD_PRELOAD="$lib" \
    MEMTRIM_CONFIG="{\"HttpPort\": $port, \"Database\": \"\", \"Program\": \"no-such-server\"}"
echo "load: $(cat /proc/loadavg)"
rm -f /tmp/exec_cost.$$
