#!/usr/bin/env bash
# `make test [ARGS='...']`: run the test suite against real Postgres and Redis.
#
#   1. venv at .venv from requirements.txt (re-installed only when it changed)
#   2. Postgres + Redis must answer; start them if we can, else fail clearly
#      (the tests exercise the real database and broker, never the embedded mode)
#   3. chromium and chromium-driver for the browser test: installed with apt-get when missing
#      (as root), else a warning (AGENTSERVER_NO_BROWSER=1 skips that test)
#   4. without arguments (the whole suite, as CI runs it): ruff (lint and format) and mypy,
#      with the settings in pyproject.toml; any finding fails the run (`make lint` alone)
#   5. .venv/bin/python -m pytest "$@"; exit status is pytest's, except that
#      "no tests collected" (pytest exit 5) is reported and kept as a failure.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

ensure_venv

if ! ensure_services; then
  die "the tests need a running Postgres ($DATABASE_URL) and Redis ($REDIS_URL), and they could not be reached or started. Start them (or point DATABASE_URL / REDIS_URL at running ones) and re-run 'make test'."
fi
ensure_database || die "could not create the database named in DATABASE_URL ($DATABASE_URL)"

# tests/test_admin_browser.py drives headless Chromium.
ensure_browser

# The embedded mode (SQLite, eager Celery) is for `make run` only; a value left
# in the caller's shell must not silently switch the tests away from Postgres.
unset AGENTSERVER_EMBEDDED

if (($# == 0)); then
  bash "$ROOT/scripts/lint.sh" || die "lint or type check failed (see above); 'make lint' runs them alone"
fi

log "running: .venv/bin/python -m pytest${*:+ ${*@Q}}"
set +e
"$VPY" -m pytest "$@"
rc=$?
set -e

case $rc in
  0) ok "tests passed" ;;
  5) printf '%s==> ERROR:%s pytest collected no tests (exit 5). A test run that runs nothing is a failure: check tests/, pytest.ini and the ARGS you passed.\n' "$_R" "$_N" >&2 ;;
  *) printf '%s==> ERROR:%s tests failed (pytest exit %s)\n' "$_R" "$_N" "$rc" >&2 ;;
esac
exit "$rc"
