#!/bin/sh
# Builds PgBouncer 1.24.1 from Debian's source tarball, for the pooler tests with
# server-side prepared statements on (max_prepared_statements, PgBouncer 1.21 and newer);
# Debian bookworm packages 1.18 only, which has no prepared-statement support at all.
#
# The binary is cached in .cache/pgbouncer-<version>/ of the checkout (ignored by git), so a
# later run only prints its path. On a fresh Debian machine (root or passwordless sudo) it
# apt-installs the build dependencies. The tarball is checked against a pinned SHA-256.
# Prints the binary's path on its last line; exits 1 with the reason when it cannot build.
#
#   PGBOUNCER_BIN=$(bash scripts/pgbouncer_build.sh | tail -n 1)
#   DRAINPIPE_PGBOUNCER="$PGBOUNCER_BIN" ./scripts/test tests/chaos/test_pgbouncer.py
set -u

VERSION=1.24.1
SHA256=da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0
TARBALL="pgbouncer_${VERSION}.orig.tar.gz"
POOL="http://deb.debian.org/debian/pool/main/p/pgbouncer"

cd "$(dirname "$0")/.." || exit 1
CACHE="$(pwd)/.cache/pgbouncer-$VERSION"
BINARY="$CACHE/bin/pgbouncer"

note() { echo "pgbouncer_build: $*" >&2; }
fail() { echo "pgbouncer_build: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

if [ -x "$BINARY" ] && "$BINARY" --version >/dev/null 2>&1; then
    echo "$BINARY"
    exit 0
fi

missing=""
for pkg in build-essential pkg-config libevent-dev libssl-dev libc-ares-dev curl; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    command -v apt-get >/dev/null 2>&1 || fail "missing$missing and there is no apt-get: install them yourself"
    note "installing$missing"
    # shellcheck disable=SC2086 # one word per package
    if ! (as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq $missing) >/tmp/pgbouncer_build_apt.log 2>&1; then
        tail -n 20 /tmp/pgbouncer_build_apt.log >&2
        fail "could not install$missing (needs root or passwordless sudo; log: /tmp/pgbouncer_build_apt.log)"
    fi
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pgbouncer-build.XXXXXX")" || fail "no temporary directory"
trap 'rm -rf "$WORK"' EXIT
note "downloading $TARBALL"
curl -fsS --retry 3 -m 120 -o "$WORK/$TARBALL" "$POOL/$TARBALL" || fail "could not download $POOL/$TARBALL"
echo "$SHA256  $WORK/$TARBALL" | sha256sum -c --quiet - >/dev/null 2>&1 \
    || fail "$TARBALL does not match its pinned SHA-256"
tar -xzf "$WORK/$TARBALL" -C "$WORK" || fail "could not unpack $TARBALL"

note "building PgBouncer $VERSION (log: $WORK/build.log while it runs)"
if ! (cd "$WORK/pgbouncer-$VERSION" \
        && ./configure --prefix="$CACHE" --with-cares \
        && make -j"$(nproc 2>/dev/null || echo 2)" && make install) >"$WORK/build.log" 2>&1; then
    tail -n 30 "$WORK/build.log" >&2
    fail "the build failed (last lines above)"
fi
"$BINARY" --version >/dev/null 2>&1 || fail "built, but $BINARY does not run"
note "built $("$BINARY" --version | head -n 1)"
echo "$BINARY"
