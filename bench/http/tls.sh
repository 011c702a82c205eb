#!/usr/bin/env bash
# What TLS costs the API: two memtrim-demo hosts in the same run, one plain HTTP and one
# HTTPS (a certificate made here with certtool, ECDSA P-256), measured in alternation with
# the same wrk command, so that the machine's load falls on both alike:
#   keep-alive   wrk -t2 -c16 on /metrics and /healthz (Prometheus keeps its connection)
#   new conns    wrk -t2 -c16 -H 'Connection: close' on /healthz: a TCP (and TLS) handshake
#                per request
# Prints each round and the medians (req/s, p99) and the TLS/plain ratio of the medians.
#
# Usage: bench/http/tls.sh [rounds]    (default 5)
# Env:   MEMTRIM_BUILD_DIR (default <repo>/build), WRK_DURATION (5s)
# Loopback only; everything temporary is removed at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${MEMTRIM_BUILD_DIR:-$root/build}"
rounds="${1:-5}"
duration="${WRK_DURATION:-5s}"
tmp="$(mktemp -d /tmp/memtrim-bench-tls.XXXXXX)"
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

for tool in wrk curl certtool; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done
[ -x "$build/memtrim-demo" ] || { echo "no $build/memtrim-demo (build first)" >&2; exit 1; }

# A CA and a server certificate for localhost.
certtool --generate-privkey --key-type=ecdsa --outfile "$tmp/ca.key" 2>/dev/null
printf 'cn = "bench CA"\nca\ncert_signing_key\nexpiration_days = 2\n' >"$tmp/ca.tmpl"
certtool --generate-self-signed --load-privkey "$tmp/ca.key" --template "$tmp/ca.tmpl" \
  --outfile "$tmp/ca.pem" 2>/dev/null
certtool --generate-privkey --key-type=ecdsa --outfile "$tmp/srv.key" 2>/dev/null
chmod 600 "$tmp/srv.key"
printf 'cn = "localhost"\ndns_name = "localhost"\nip_address = "127.0.0.1"\ntls_www_server\nsigning_key\nexpiration_days = 2\n' >"$tmp/srv.tmpl"
certtool --generate-certificate --load-privkey "$tmp/srv.key" --load-ca-certificate "$tmp/ca.pem" \
  --load-ca-privkey "$tmp/ca.key" --template "$tmp/srv.tmpl" --outfile "$tmp/srv.pem" 2>/dev/null

# Two hosts, the same light workload and no trims; one with the certificate.
no_trims='"TrimIntervalSeconds":0,"TrimReleasableTriggerBytes":0,"PressureRatio":0'
start() { # start NAME EXTRA_KEYS
  "$build/memtrim-demo" --lib "$build/libmemtrim.so" \
    --config "{\"HttpPort\":0,\"Database\":\"$tmp/$1.sqlite\",$no_trims$2}" \
    --workers 1 --study-mb 16 --pause-ms 5000 --port-file "$tmp/$1.port" --quiet \
    >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do [ -s "$tmp/$1.port" ] && return 0; sleep 0.1; done
  echo "host $1 did not start: $(cat "$tmp/$1.log")" >&2
  exit 1
}
start plain ""
start tls ",\"HttpsCertificate\":\"$tmp/srv.pem\",\"HttpsPrivateKey\":\"$tmp/srv.key\""
plain="http://127.0.0.1:$(cat "$tmp/plain.port")"
tls="https://localhost:$(cat "$tmp/tls.port")"
curl -fsS -o /dev/null "$plain/healthz"
curl -fsS -o /dev/null --cacert "$tmp/ca.pem" "$tls/healthz"

# One wrk run: "req/s p99_ms" (wrk does not check the certificate; curl did above).
run_wrk() { # run_wrk URL [header]
  local out
  if [ -n "${2:-}" ]; then
    out=$(wrk -t2 -c16 -d"$duration" --latency -H "$2" "$1")
  else
    out=$(wrk -t2 -c16 -d"$duration" --latency "$1")
  fi
  local rps p99
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; print v}' <<<"$out")
  local errors
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [ -z "$errors" ] || echo "    ($1: $errors)" >&2
  echo "$rps $p99"
}

cases=("keepalive /metrics|/metrics|" "keepalive /healthz|/healthz|" "new-conn /healthz|/healthz|Connection: close")
declare -A results
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name path header <<<"$c"
    for side in plain tls; do
      base=$plain
      [ "$side" = tls ] && base=$tls
      res=$(run_wrk "$base$path" "$header")
      results["$name|$side"]+="$res;"
      printf 'round %d  %-20s %-5s %10s req/s  p99 %8s ms\n' "$r" "$name" "$side" ${res}
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo
printf '%-20s %14s %12s %14s %12s %10s\n' case "plain req/s" "plain p99" "TLS req/s" "TLS p99" "TLS/plain"
for c in "${cases[@]}"; do
  IFS='|' read -r name _ _ <<<"$c"
  pr=$(tr ';' '\n' <<<"${results["$name|plain"]}" | awk 'NF {print $1}' | median)
  pp=$(tr ';' '\n' <<<"${results["$name|plain"]}" | awk 'NF {print $2}' | median)
  tr_=$(tr ';' '\n' <<<"${results["$name|tls"]}" | awk 'NF {print $1}' | median)
  tp=$(tr ';' '\n' <<<"${results["$name|tls"]}" | awk 'NF {print $2}' | median)
  ratio=$(awk -v a="$tr_" -v b="$pr" 'BEGIN {printf "%.3f", a / b}')
  printf '%-20s %14.0f %10.2f ms %14.0f %10.2f ms %10s\n' "$name" "$pr" "$pp" "$tr_" "$tp" "$ratio"
done
