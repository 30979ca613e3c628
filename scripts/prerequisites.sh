#!/bin/sh
# The Debian packages `make test` needs beyond Python: installs the missing ones with apt-get when
# run as root, otherwise stops at once with the one command to run. Silent when all are present.
#   chromium       /usr/bin/chromium: the dashboard's browser tests (Playwright executable_path)
#   openssl        /usr/bin/openssl: a self-signed certificate for the dashboard's TLS test
#   pgbouncer      /usr/sbin/pgbouncer: tests/servers.py puts a real pgbouncer in front of servers
#   postgresql-15  initdb, pg_ctl, postgres, pg_basebackup: tests/servers.py's own clusters, which
#                  tests restart, kill and fail over (and CI's second `make test` on PostgreSQL 15)
#   iproute2       ip, tc: the hosts tier (tests/hosts) builds hosts of network namespaces and
#                  veth pairs, cuts and slows their links
#   faketime       libfaketime (LD_PRELOAD): the hosts tier's workers whose clock is 90 s off
#   patroni        the hosts tier's high-availability cluster of three PostgreSQL 15 nodes,
#   etcd-server    with one etcd as Patroni's store (etcd-client: etcdctl, to look at it)
#   etcd-client
#   prometheus     /usr/bin/promtool: tests/integration/test_monitoring.py checks and unit-tests the alert rules
#   nodejs, npm    node, npm: the SQL interface's tests defer from Node (examples/node, pg from npm)
set -eu

PG15=/usr/lib/postgresql/15/bin
missing=""
need() { # need PACKAGE FILE...: PACKAGE is missing when one of its files is not executable
    package=$1
    shift
    for file in "$@"; do
        if [ ! -x "$file" ]; then
            missing="$missing $package"
            return 0
        fi
    done
}
need chromium /usr/bin/chromium
need openssl /usr/bin/openssl
need pgbouncer /usr/sbin/pgbouncer
need postgresql-15 "$PG15/initdb" "$PG15/pg_ctl" "$PG15/postgres" "$PG15/pg_basebackup"
need iproute2 /usr/sbin/ip /usr/sbin/tc
# faketime brings libfaketime (/usr/lib/<multiarch>/faketime/libfaketime.so.1), which tests use.
need faketime /usr/bin/faketime
need patroni /usr/bin/patroni /usr/bin/patronictl
need etcd-server /usr/bin/etcd
need etcd-client /usr/bin/etcdctl
need prometheus /usr/bin/promtool
need nodejs /usr/bin/node
need npm /usr/bin/npm

[ -z "$missing" ] && exit 0
missing=${missing# }

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "make test needs Debian packages that are missing: $missing; install them with: sudo apt-get install -y $missing" >&2
    exit 1
fi

echo "make test: installing the missing Debian packages $missing (apt-get install --no-install-recommends)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086 # one word per package
apt-get install -y -q --no-install-recommends $missing
