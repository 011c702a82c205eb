#!/usr/bin/env bash
# What a TLS handshake flood costs the host: the CPU of memtrim's HTTP threads (libmicrohttpd's
# threads, where every handshake runs) while wrk opens a new connection per
# request (-H 'Connection: close': a full TLS handshake each), for each key type and
# HttpThreads. The figure is the threads' utime+stime over the run (from
# /proc/PID/task/TID/stat) divided by its wall time: 1.00 = one core. The cases run in
# alternation, each round once, so that the machine's load falls on all alike.
#
# Usage: bench/http/tls_cpu.sh [rounds]    (default 3)
# Env:   MEMTRIM_BUILD_DIR (default <repo>/build), WRK_DURATION (5s), WRK_CONNS (32)
# Loopback only; everything temporary is removed at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${MEMTRIM_BUILD_DIR:-$root/build}"
rounds="${1:-3}"
duration="${WRK_DURATION:-5s}"
conns="${WRK_CONNS:-32}"
tmp="$(mktemp -d /tmp/memtrim-bench-tlscpu.XXXXXX)"
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

for tool in wrk curl openssl; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done
[ -x "$build/memtrim-demo" ] || { echo "no $build/memtrim-demo (build first)" >&2; exit 1; }

# Self-signed server certificates for localhost: ECDSA P-256 and RSA 4096.
cert() { # cert NAME NEWKEY_ARGS...
  openssl req -x509 -newkey "${@:2}" -nodes -keyout "$tmp/$1.key" -out "$tmp/$1.pem" -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1
  chmod 600 "$tmp/$1.key"
}
cert ecdsa ec -pkeyopt ec_paramgen_curve:P-256
cert rsa4096 rsa:4096

# One host per case, the same light workload and no trims.
no_trims='"TrimIntervalSeconds":0,"TrimReleasableTriggerBytes":0,"PressureRatio":0'
declare -A pid_of port_of
start() { # start CASE KEY THREADS
  "$build/memtrim-demo" --lib "$build/libmemtrim.so" \
    --config "{\"HttpPort\":0,\"Database\":\":memory:\",$no_trims,\"HttpThreads\":$3,\"HttpsCertificate\":\"$tmp/$2.pem\",\"HttpsPrivateKey\":\"$tmp/$2.key\"}" \
    --workers 1 --study-mb 4 --pause-ms 5000 --port-file "$tmp/$1.port" --quiet \
    >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  pid_of[$1]=$!
  for _ in $(seq 1 200); do [ -s "$tmp/$1.port" ] && break; sleep 0.1; done
  [ -s "$tmp/$1.port" ] || { echo "host $1 did not start: $(cat "$tmp/$1.log")" >&2; exit 1; }
  port_of[$1]=$(cat "$tmp/$1.port")
  curl -fsS -o /dev/null --cacert "$tmp/$2.pem" "https://localhost:${port_of[$1]}/healthz"
}
cases=(ecdsa-1 ecdsa-2 rsa4096-1 rsa4096-2)
for c in "${cases[@]}"; do start "$c" "${c%-*}" "${c##*-}"; done

# The HTTP threads' CPU ticks so far (utime + stime of libmicrohttpd's threads: "MHD-worker"
# with HttpThreads > 1, "MHD-single" with 1).
ticks() { # ticks PID
  local sum=0 t
  for t in /proc/"$1"/task/*; do
    case "$(cat "$t/comm" 2>/dev/null)" in MHD-worker | MHD-single) ;; *) continue ;; esac
    sum=$((sum + $(awk '{print $14 + $15}' "$t/stat")))
  done
  echo "$sum"
}
hz=$(getconf CLK_TCK)

declare -A cores rps
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    p=${pid_of[$c]}
    t0=$(ticks "$p")
    s0=$(date +%s.%N)
    out=$(wrk -t2 -c"$conns" -d"$duration" -H 'Connection: close' \
      "https://localhost:${port_of[$c]}/healthz")
    s1=$(date +%s.%N)
    t1=$(ticks "$p")
    rate=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    use=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s0="$s0" -v s1="$s1" \
      'BEGIN {printf "%.2f", (b - a) / hz / (s1 - s0)}')
    printf 'round %d  %-10s  handshakes/s %8.0f  HTTP threads %s cores\n' "$r" "$c" "$rate" "$use"
    cores[$c]+="$use "
    rps[$c]+="$rate "
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo
echo "| key, HttpThreads | handshakes/s | HTTP threads' CPU (cores) | CPU ms per handshake |"
echo "|---|---|---|---|"
for c in "${cases[@]}"; do
  mc=$(median <<<"${cores[$c]}")
  mr=$(median <<<"${rps[$c]}")
  per=$(awk -v c="$mc" -v r="$mr" 'BEGIN {printf "%.2f", (r > 0) ? (c * 1000 / r) : 0}')
  echo "| ${c%-*}, ${c##*-} | $mr | $mc | $per |"
done
