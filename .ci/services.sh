#!/usr/bin/env bash
# Install (if missing) and start the services the integration tests need: Docker engine and PostgreSQL
# (plus debootstrap for the sandbox image and Chromium for the report's headless rendering test).
# Idempotent: safe to run again while they are up. Prints the Postgres URL for the tests as its last line
# (`export EVOTRAINER_TEST_PG_URL=...`), so callers can `eval "$(.ci/services.sh | tail -n 1)"`.
# `--docker-only` (make demo): only what the demo runs, the Docker engine and debootstrap for its image.
set -euo pipefail
log() { echo "[services] $*" >&2; }
docker_only=0
[ "${1:-}" = "--docker-only" ] && docker_only=1
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "$docker_only" -eq 0 ]; then
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v chromium >/dev/null || need+=(chromium)  # headless check of the HTML session report
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need[@]}" >&2
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  (dockerd >/var/log/evotrainer-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start; see /var/log/evotrainer-dockerd.log"; exit 1; }
fi

[ "$docker_only" -eq 1 ] && exit 0

PG_PORT=${EVOTRAINER_PG_PORT:-55432}
PG_DIR=${EVOTRAINER_PG_DIR:-/var/lib/evotrainer-pg}
PG_BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
if ! "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
  if [ ! -f "$PG_DIR/PG_VERSION" ]; then
    log "creating Postgres cluster in $PG_DIR"
    mkdir -p "$PG_DIR"; chown postgres:postgres "$PG_DIR"
    su postgres -c "$PG_BIN/initdb -D $PG_DIR -A trust -U postgres" >&2
  fi
  log "starting Postgres on 127.0.0.1:$PG_PORT"
  su postgres -c "$PG_BIN/pg_ctl -D $PG_DIR -l $PG_DIR/server.log -w -o '-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1' start" >&2
fi
"$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='evotrainer_test'" | grep -q 1 \
  || "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -c "CREATE DATABASE evotrainer_test" >&2
echo "export EVOTRAINER_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/evotrainer_test"
