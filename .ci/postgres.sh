#!/usr/bin/env bash
# A throwaway PostgreSQL for the registry tests, from Debian's packages.
#   .ci/postgres.sh install        install `postgresql` with apt when root and it is absent
#   .ci/postgres.sh exec CMD...    start a server (temp dir, free port, trust auth on 127.0.0.1), run CMD with
#                                  PLACEMENT_TEST_POSTGRES=postgresql://postgres@127.0.0.1:PORT/postgres (and
#                                  PLACEMENT_TEST_PG_BIN: initdb and pg_ctl, for tests that stop a server of their
#                                  own), stop the server by its PID, exit with CMD's status. Without PostgreSQL, CMD runs alone
#                                  (the PostgreSQL tests skip locally and fail when CI=true). PLACEMENT_PG_FSYNC=on
#                                  for benchmarks (tests run with fsync off: they kill the server, not the machine).
set -euo pipefail

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; fi
}

install_pg() {
  if [ -n "$(pg_bin)" ]; then return 0; fi
  if [ "$(id -u)" != 0 ]; then
    echo "postgres.sh: PostgreSQL is absent and this is not root; not installing" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq || true
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq postgresql >/dev/null
}

as_pg() {  # run as the postgres user when root (initdb refuses root)
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

run_with_pg() {
  local bin dir port pid status url
  bin=$(pg_bin)
  if [ -z "$bin" ]; then
    echo "postgres.sh: no PostgreSQL; running without it" >&2
    "$@"
    return $?
  fi
  dir=$(mktemp -d /tmp/placement-pg.XXXXXX)
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=${PLACEMENT_PG_FSYNC:-off} -c max_connections=200" start >/dev/null
  pid=$(head -n 1 "$dir/data/postmaster.pid")
  url="postgresql://postgres@127.0.0.1:$port/postgres"
  echo "postgres.sh: PostgreSQL $(basename "$(dirname "$bin")") pid $pid at $url" >&2
  status=0
  PLACEMENT_TEST_POSTGRES="$url" PLACEMENT_TEST_PG_BIN="$bin" "$@" || status=$?
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$dir"
  return $status
}

case "${1:-}" in
  install) install_pg ;;
  exec) shift; run_with_pg "$@" ;;
  *) echo "usage: $0 install | exec CMD..." >&2; exit 2 ;;
esac
