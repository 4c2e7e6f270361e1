#!/usr/bin/env bash
# Installs the real servers the tests start (etcd, Redis, PostgreSQL, Prometheus with promtool)
# and the browser the chat page's tests drive (Chromium) from Debian's packages when they are
# missing. The tests start and stop their own instances on free ports.
set -euo pipefail
missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v redis-server >/dev/null || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
# Prometheus and promtool: the deploy tests check the rules and scrape a running platform.
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || missing+=(prometheus)
# Debian's Chromium: test tools cannot download their own browsers here.
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "services: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
