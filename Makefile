# agentserver developer commands. The logic lives in scripts/ (plain bash);
# these targets are the stable names the README and CI use.
#
#   make run                  start everything locally (falls back to the
#                             embedded SQLite mode if Postgres/Redis are missing)
#   make run PORT=8001        ... on another port
#   make test                 run the test suite (needs Postgres + Redis)
#   make test ARGS='-k card'  ... passing extra arguments to pytest

SHELL := /bin/bash
ARGS ?=
PORT ?= 8000
export PORT

.DEFAULT_GOAL := help
.PHONY: help run test lint venv lock services compose-config clean

help:
	@echo "make run                  start web + worker on http://127.0.0.1:$(PORT) (Ctrl-C stops)"
	@echo "make test [ARGS='-k x']   run pytest against Postgres + Redis (whole suite: lint first)"
	@echo "make lint                 ruff (lint, format check) and mypy"
	@echo "make venv                 create/refresh .venv from requirements.txt"
	@echo "make lock                 re-pin constraints.txt (what requirements.txt pulls in)"
	@echo "make services             start local Postgres/Redis if they are not running"
	@echo "make compose-config       validate docker-compose.yml"
	@echo "make clean                remove .run/'s logs and caches; keeps .venv, .data and the demo key and admin password"

run:
	@bash scripts/run.sh

test:
	@bash scripts/test.sh $(ARGS)

lint:
	@bash scripts/lint.sh

venv:
	@bash -c 'source scripts/lib.sh && ensure_venv'

lock:
	@bash scripts/lock.sh

services:
	@bash -c 'source scripts/lib.sh && ensure_services'

compose-config:
	@bash scripts/compose-config.sh

clean:
	@# The demo key and the admin's password stay: the database (.data, or Postgres) keeps them.
	[ ! -d .run ] || find .run -mindepth 1 -maxdepth 1 ! -name demo-key ! -name admin-password -exec rm -rf {} +
	rm -rf .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
