#!/usr/bin/env bash
# The demo's first impression (issue 26): `./dev demo` from a fresh clone with a fresh venv, a
# private stack home and free ports, every output line stamped with the seconds since the
# start; Ctrl-C (SIGINT to its process group, as a terminal sends it) 25 s after the first
# served answer; then a look for anything of it left running. Prints the two figures.
#   bench/first_impression.sh [REV]   (default HEAD; run it for two revisions to compare)
# Needs what ./dev needs; pip's cache, the Kafka jars and the Debian packages are used as this
# machine has them (say so beside the figures).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
REV=${1:-HEAD}
WORK=$(mktemp -d /tmp/precast-first-impression.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export PRECAST_STACK__KAFKA_PORT=$(free_port) PRECAST_STACK__CONTROLLER_PORT=$(free_port)
export PRECAST_STACK__REDIS_PORT=$(free_port) PRECAST_STACK__PROMETHEUS_PORT=$(free_port)
export PRECAST_STACK__REDIS_EXPORTER_PORT=$(free_port)
unset PRECAST_STACK__HOME PRECAST_DEV_VENV  # the clone's own .precast/ and .venv/
PORT=$(free_port)

git clone -q "$REPO" "$WORK/clone"
git -C "$WORK/clone" checkout -q "$REV"
cd "$WORK/clone"
T0=$(date +%s.%N)
setsid ./dev demo --port "$PORT" > "$WORK/raw.log" 2>&1 &
PID=$!
stamp() {  # seconds since T0 of the first line matching $1
  python3 - "$T0" "$1" "$WORK/raw.log" "$PID" <<'PY'
import os, re, sys, time
t0, pattern, path, pid = float(sys.argv[1]), re.compile(sys.argv[2]), sys.argv[3], int(sys.argv[4])
while not pattern.search(open(path, errors="replace").read()):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(f"./dev demo ended before printing {sys.argv[2]!r}: see {path}")
    time.sleep(0.05)
print(f"{time.time() - t0:.1f}")
PY
}
URL_S=$(stamp "board: http://127.0.0.1:$PORT/board/")
ANSWER_S=$(stamp "prediction -> 200")
sleep 25
kill -INT -- "-$PID"
RC=0
wait "$PID" || RC=$?
sleep 2
LEFT=$(ps -eo pid,args | grep -E "$WORK|127.0.0.1:($PRECAST_STACK__KAFKA_PORT|$PRECAST_STACK__REDIS_PORT|$PRECAST_STACK__PROMETHEUS_PORT|$PORT)" | grep -v grep || true)
echo "rev $(git rev-parse --short HEAD): board URL at ${URL_S} s, first served answer at ${ANSWER_S} s, exit ${RC} after Ctrl-C"
echo "left running: ${LEFT:-nothing}"
echo "output: $WORK/raw.log"
