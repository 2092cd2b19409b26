#!/usr/bin/env bash
# A throw-away PostgreSQL on 127.0.0.1 for the store tests.
#   eval "$(scripts/postgres.sh start)"   # prints export lines (SHOAL_TEST_PG_URL, ...)
#   scripts/postgres.sh stop
# Runs initdb/pg_ctl as the `postgres` user when started as root (creating that user if
# missing); installs PostgreSQL with apt-get when initdb is nowhere to be found.
set -euo pipefail
STATE=${TMPDIR:-/tmp}/shoal-postgres.dir

find_bin() {
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/$name" ]; then echo "$dir/$name"; return; fi
  done
  return 1
}

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    su -s /bin/sh postgres -c "$(printf '%q ' "$@")"
  else
    "$@"
  fi
}

start() {
  if ! find_bin initdb >/dev/null; then
    echo "postgres.sh: initdb not found; installing postgresql with apt-get" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  local initdb pg_ctl dir port
  initdb=$(find_bin initdb)
  pg_ctl=$(find_bin pg_ctl)
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /bin/sh postgres
  fi
  dir=$(mktemp -d "${TMPDIR:-/tmp}/shoal-pg.XXXXXX")
  chmod 755 "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_pg "$initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  as_pg "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" \
    start >&2 || { cat "$dir/server.log" >&2; exit 1; }
  echo "$dir" >"$STATE"
  echo "export SHOAL_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
  echo "export SHOAL_PG_DIR=$dir"
  # CI started a server on purpose: a postgres test that cannot reach it must fail.
  echo "export SHOAL_REQUIRE_PG=1"
}

stop() {
  local dir=${SHOAL_PG_DIR:-}
  if [ -z "$dir" ] && [ -f "$STATE" ]; then dir=$(cat "$STATE"); fi
  if [ -z "$dir" ] || [ ! -d "$dir/data" ]; then
    echo "postgres.sh: nothing to stop" >&2
    return 0
  fi
  as_pg "$(find_bin pg_ctl)" -D "$dir/data" -m fast -w stop >&2 || true
  rm -rf "$dir"
  rm -f "$STATE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
