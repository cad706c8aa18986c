#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for Ferry's store tests and prints the one line
# a caller evaluates to point the tests at it:
#
#     eval "$(scripts/postgres-test-server.sh)"     # sets FERRY_TEST_POSTGRES_URL
#     scripts/postgres-test-server.sh stop          # stops it again
#
# Installs Debian's `postgresql` package when no server binaries are found. The cluster
# lives in $FERRY_PG_DIR (default: a directory per port under the temp dir), listens on
# 127.0.0.1:$FERRY_PG_PORT (default 55432) only, trusts local connections and runs
# without fsync: it holds test data, nothing else. Running the script again while the
# server is up reuses it. Everything but the final `export` line goes to stderr.
set -euo pipefail

PORT="${FERRY_PG_PORT:-55432}"
DIR="${FERRY_PG_DIR:-${TMPDIR:-/tmp}/ferry-pg-${PORT}}"
DB="${FERRY_PG_DB:-ferry_test}"
SUPERUSER=ferry
URL="postgres://${SUPERUSER}@127.0.0.1:${PORT}/${DB}"

say() { echo "postgres-test-server: $*" >&2; }
die() { say "error: $*"; exit 1; }

# Finds the directory holding initdb/pg_ctl: $PATH first, then Debian's versioned dirs.
find_bindir() {
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        # Resolve symlinks: the server's tools (pg_isready, psql) sit beside the real binary.
        local real
        real="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
        if [ -x "$real/pg_isready" ] && [ -x "$real/psql" ]; then
            echo "$real"
            return 0
        fi
    fi
    local newest
    newest="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -n "$newest" ] && [ -x "$newest/initdb" ] && [ -x "$newest/pg_ctl" ]; then
        echo "$newest"
        return 0
    fi
    return 1
}

BINDIR="$(find_bindir || true)"
if [ -z "$BINDIR" ]; then
    [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and this is not root; install Debian's 'postgresql' package"
    say "installing Debian's postgresql package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends postgresql >&2
    BINDIR="$(find_bindir)" || die "postgresql installed but initdb/pg_ctl not found under /usr/lib/postgresql/*/bin"
fi

# initdb and postgres refuse to run as root: run them as the 'postgres' account then.
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres
    as_owner() { runuser -u postgres -- "$@"; }
    OWNER=postgres
else
    as_owner() { "$@"; }
    OWNER="$(id -un)"
fi

if [ "${1:-}" = "stop" ]; then
    if [ -f "$DIR/PG_VERSION" ]; then
        as_owner "$BINDIR/pg_ctl" -D "$DIR" -m fast stop >&2 || true
    fi
    say "stopped (data left in $DIR)"
    exit 0
fi

if [ ! -f "$DIR/PG_VERSION" ]; then
    say "initialising a cluster in $DIR"
    mkdir -p "$DIR"
    chown "$OWNER" "$DIR"
    chmod 700 "$DIR"
    as_owner "$BINDIR/initdb" -D "$DIR" --username="$SUPERUSER" --auth=trust \
        --encoding=UTF8 --locale=C.UTF-8 >"$DIR.initdb.log" 2>&1 \
        || as_owner "$BINDIR/initdb" -D "$DIR" --username="$SUPERUSER" --auth=trust \
            --encoding=UTF8 --no-locale >"$DIR.initdb.log" 2>&1 \
        || { cat "$DIR.initdb.log" >&2; die "initdb failed (log above)"; }
fi

if as_owner "$BINDIR/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
    say "reusing the server already running from $DIR"
else
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        die "port $PORT is taken by another program; set FERRY_PG_PORT to a free port"
    fi
    say "starting on 127.0.0.1:$PORT"
    as_owner "$BINDIR/pg_ctl" -D "$DIR" -l "$DIR/server.log" -w -t 60 start -o \
        "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        >&2 || { tail -n 30 "$DIR/server.log" >&2 || true; die "the server did not start (log above)"; }
fi

psql_admin() { "$BINDIR/psql" -h 127.0.0.1 -p "$PORT" -U "$SUPERUSER" -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }

for _ in $(seq 1 60); do
    if "$BINDIR/pg_isready" -h 127.0.0.1 -p "$PORT" -U "$SUPERUSER" -q; then break; fi
    sleep 0.5
done
"$BINDIR/pg_isready" -h 127.0.0.1 -p "$PORT" -U "$SUPERUSER" -q || die "the server on port $PORT does not accept connections; see $DIR/server.log"

if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != "1" ]; then
    psql_admin -c "CREATE DATABASE \"$DB\"" >&2
    say "created database $DB"
fi

echo "export FERRY_TEST_POSTGRES_URL=$URL"
