#!/usr/bin/env bash
# `make test [ARGS='...']`: run the test suite against real Postgres and Redis.
#
#   1. venv at .venv from requirements.txt (re-installed only when it changed)
#   2. Postgres + Redis must answer; start them if we can, else fail clearly
#      (the tests exercise the real database and broker, never the embedded mode)
#   3. chromium and chromium-driver for the browser test: installed with apt-get when missing
#      (as root), else a warning (AGENTSERVER_NO_BROWSER=1 skips that test)
#   4. without arguments (the whole suite, as CI runs it): ruff (lint and format) and mypy,
#      with the settings in pyproject.toml, beside pytest (they are mostly one core's work
#      while the tests mostly wait); any finding fails the run (`make lint` alone)
#   5. .venv/bin/python -m pytest "$@"; in one process, or on TEST_WORKERS pytest-xdist
#      workers when set (not yet the default: docs/testing.md says what still fails on
#      parallel workers). Exit status is pytest's, except that "no tests collected" (pytest
#      exit 5) is reported and kept as a failure.
#   6. the whole suite's wall time against TEST_TIME_BUDGET seconds (default 2700; 0: none):
#      over it fails the run, naming the slowest modules (scripts/test_budget.py).
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

# Compiled modules are kept (under .run/, never beside the sources) even where the caller's
# environment says not to write them: otherwise every pytest worker, and every daphne, Celery
# worker and Python the tests start, compiles the project (and pytest rewrites the test
# modules) afresh: 36 s of a collection's CPU instead of 14 s, per process.
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$RUN_DIR/pycache}"
unset PYTHONDONTWRITEBYTECODE

whole_suite=0
(($# == 0)) && whole_suite=1
budget="${TEST_TIME_BUDGET:-2700}"
mkdir -p "$RUN_DIR"
lint_log="$RUN_DIR/lint.log"
lint_pid=""
if ((whole_suite)); then
  log "ruff and mypy beside the tests (log: ${lint_log#"$ROOT"/})"
  # At a lower priority: the tests' timed waits matter more than when the type check ends.
  nice -n 5 bash "$ROOT/scripts/lint.sh" >"$lint_log" 2>&1 &
  lint_pid=$!
fi

args=("$@")
workers="${TEST_WORKERS:-}"
if [[ -n "$workers" && "$workers" != 0 ]]; then
  # Whole modules to a worker: module-scoped worlds and live stacks stay in one process.
  args=(-n "$workers" --dist loadfile "${args[@]}")
fi
junit="$RUN_DIR/pytest-junit.xml"
rm -f "$junit"
((whole_suite)) && args+=(--junitxml="$junit")

log "running: .venv/bin/python -m pytest${args[*]:+ ${args[*]@Q}}"
started=$SECONDS
set +e
"$VPY" -m pytest "${args[@]}"
rc=$?
set -e
wall=$((SECONDS - started))

lint_rc=0
if [[ -n "$lint_pid" ]]; then
  wait "$lint_pid" || lint_rc=$?
  cat "$lint_log"
fi

budget_rc=0
if ((whole_suite)) && ((rc == 0 || rc == 1)); then
  "$PYTHON" "$ROOT/scripts/test_budget.py" "$junit" "$wall" "$budget" || budget_rc=$?
fi

case $rc in
  0) ok "tests passed" ;;
  5) printf '%s==> ERROR:%s pytest collected no tests (exit 5). A test run that runs nothing is a failure: check tests/, pytest.ini and the ARGS you passed.\n' "$_R" "$_N" >&2 ;;
  *) printf '%s==> ERROR:%s tests failed (pytest exit %s)\n' "$_R" "$_N" "$rc" >&2 ;;
esac
if ((lint_rc != 0)); then
  printf '%s==> ERROR:%s lint or type check failed (see above); '"'"'make lint'"'"' runs them alone\n' "$_R" "$_N" >&2
  ((rc != 0)) || rc=1
fi
if ((budget_rc != 0)); then
  printf '%s==> ERROR:%s the test suite took %s s, over TEST_TIME_BUDGET=%s s (slowest modules above)\n' "$_R" "$_N" "$wall" "$budget" >&2
  ((rc != 0)) || rc=1
fi
exit "$rc"
