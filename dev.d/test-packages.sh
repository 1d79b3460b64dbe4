#!/usr/bin/env bash
# The Debian packages `./dev test` needs besides Python: PostgreSQL's server (dev.d/services.py
# starts a throwaway cluster from its binaries), redis-server (likewise, and some tests start
# private ones), nodejs + npm (npm ci), Chromium (the page tests), valgrind (the
# instruction-count benchmark's test), and PgBouncer and HAProxy (the tests start private
# ones on free ports, from /usr/sbin: tests/support/pgbouncer.py, balancer.py; the system
# service the pgbouncer package may start listens on 6432 and is not used). Installs the missing ones when it may (root, or sudo
# without a password); otherwise fails with one line saying what to install.
set -euo pipefail

missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
[ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
[ -x /usr/sbin/haproxy ] || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  as_root=(none)
fi
if [ "${as_root[*]}" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "./dev test needs these Debian packages: ${missing[*]} (install them: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

echo "./dev test: installing ${missing[*]}" >&2
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y)
"${apt[@]}" update -qq </dev/null
"${apt[@]}" install -qq "${missing[@]}" </dev/null >/dev/null
