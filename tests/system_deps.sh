#!/usr/bin/env bash
# System packages the tests drive for real: headless Chromium (the dashboard's browser test) and
# a PostgreSQL server (tests/test_postgres.py starts a private one with initdb and pg_ctl).
# Installed from Debian with apt-get when missing; nothing is done when they are there.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
# Debian keeps the server programs off PATH, in /usr/lib/postgresql/<version>/bin.
has_postgres() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    return 0
  fi
  local bin
  for bin in /usr/lib/postgresql/*/bin; do
    [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && return 0
  done
  return 1
}
has_postgres || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing ${missing[*]} with apt-get" >&2
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
