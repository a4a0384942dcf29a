#!/bin/sh
# A second Postgres 15 cluster on port 5433 with pg_cron preloaded, for the pg_cron tests.
# The main cluster (5432) is never restarted: shared_preload_libraries needs a restart, so
# pg_cron gets a cluster of its own. Idempotent. On a fresh Debian machine (root or
# passwordless sudo) it apt-installs postgresql-15-cron (which brings postgresql-15 and
# postgresql-common when missing). Exits 1 with the reason when it cannot set things up or
# the cluster does not answer with pg_cron preloaded: CI (.ci/run) stops there. Outside CI
# the pg_cron tests then skip and say why. pg_cron 1.4 runs jobs only in
# cron.database_name, so the tests install drainpipe into that database ("postgres").
set -u

PORT="${PG_CRON_PORT:-5433}"
VERSION=15
NAME=cron
CONF_DIR="/etc/postgresql/$VERSION/$NAME"

note() { echo "pg_cron_cluster: $*"; }
fail() { echo "pg_cron_cluster: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

if [ ! -f "/usr/share/postgresql/$VERSION/extension/pg_cron.control" ] || ! command -v pg_createcluster >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || fail "pg_cron is not installed and there is no apt-get (not Debian/Ubuntu): install postgresql-$VERSION-cron yourself"
    note "installing postgresql-$VERSION-cron"
    if ! (as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq "postgresql-$VERSION-cron") >/tmp/pg_cron_cluster_apt.log 2>&1; then
        tail -n 20 /tmp/pg_cron_cluster_apt.log >&2
        fail "could not install postgresql-$VERSION-cron (needs root or passwordless sudo; log: /tmp/pg_cron_cluster_apt.log)"
    fi
fi
command -v pg_createcluster >/dev/null 2>&1 || fail "pg_createcluster not found after installing postgresql-$VERSION-cron"

if [ ! -d "$CONF_DIR" ]; then
    note "creating cluster $VERSION/$NAME on port $PORT"
    if ! as_root pg_createcluster "$VERSION" "$NAME" --port "$PORT" >/tmp/pg_cron_cluster_create.log 2>&1; then
        cat /tmp/pg_cron_cluster_create.log >&2
        fail "pg_createcluster failed (log: /tmp/pg_cron_cluster_create.log)"
    fi
fi

# conf.d is read after postgresql.conf, so these settings win and survive re-runs unchanged.
as_root mkdir -p "$CONF_DIR/conf.d"
as_root sh -c "cat > '$CONF_DIR/conf.d/pg_cron.conf'" <<CONF
port = $PORT
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
CONF
HBA="$CONF_DIR/pg_hba.conf"
if ! grep -q '^host all all 127.0.0.1/32 trust' "$HBA" 2>/dev/null; then
    # first matching line wins, so trust goes on top
    as_root sh -c "{ echo 'host all all 127.0.0.1/32 trust'; cat '$HBA'; } > '$HBA.new' && mv '$HBA.new' '$HBA' && chown postgres:postgres '$HBA'"
fi

if pg_lsclusters -h 2>/dev/null | awk -v v="$VERSION" -v n="$NAME" '$1 == v && $2 == n && $4 == "online" { found = 1 } END { exit !found }'; then
    # already running: a reload picks up pg_hba and most settings; preloading needs a restart
    # (of this test cluster only, never the main one)
    as_root pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$NAME" reload >/dev/null 2>&1 || true
    preload=$(psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atc 'SHOW shared_preload_libraries' 2>/dev/null || true)
    case "$preload" in
        *pg_cron*) ;;
        *) as_root pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$NAME" restart >/tmp/pg_cron_cluster_start.log 2>&1 \
               || fail "could not restart cluster $VERSION/$NAME (log: /tmp/pg_cron_cluster_start.log)" ;;
    esac
else
    if ! as_root pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$NAME" start >/tmp/pg_cron_cluster_start.log 2>&1; then
        cat /tmp/pg_cron_cluster_start.log >&2
        fail "could not start cluster $VERSION/$NAME (log: /tmp/pg_cron_cluster_start.log)"
    fi
fi

# the tests' own check, so a cluster that runs but cannot serve them fails here, loudly
preload=""
for _ in $(seq 1 30); do
    preload=$(psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atc 'SHOW shared_preload_libraries' 2>/dev/null) && break
    sleep 1
done
case "$preload" in
    *pg_cron*) ;;
    *) fail "the cluster on 127.0.0.1:$PORT does not answer with pg_cron preloaded (shared_preload_libraries: '${preload}')" ;;
esac
note "pg_cron cluster $VERSION/$NAME listening on 127.0.0.1:$PORT"
exit 0
