#!/usr/bin/env bash
# `make lint`: ruff (lint, then format check) and mypy with django-stubs, settings in
# pyproject.toml. `make test` runs it first when it runs the whole suite.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

ensure_venv
log "ruff check"
"$VENV/bin/ruff" check .
log "ruff format --check"
"$VENV/bin/ruff" format --check .
log "mypy"
"$VENV/bin/mypy"
ok "lint and types clean"
