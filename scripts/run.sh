#!/usr/bin/env bash
# `make run`: start agentserver locally, ready to curl.
#
#   1. venv at .venv from requirements.txt (re-installed only when it changed)
#   2. Postgres + Redis: use them if they answer, start them if we can; if
#      either is still missing, fall back to the embedded mode
#      (AGENTSERVER_EMBEDDED=1: SQLite in .data/, Celery work done in-process)
#   3. migrate, seed the demo tenant, collect the static files (the admin's CSS
#      and JS, into STATIC_ROOT), start daphne (+ a Celery worker with beat
#      and the AIP group runner `manage.py aip_groups`, unless embedded), wait
#      until an agent card answers
#   4. print URLs, the API key (kept in RUN_DIR/demo-key, the same on every run), a curl
#      example and the admin's login (a development superuser made on the first run, its
#      password kept in RUN_DIR/admin-password), then stay in the foreground until Ctrl-C,
#      stopping everything it started.
#
# The conformance agent is also bound to its own host names (docs/tenancy.md): CONFORMANCE_HOST
# (default 127.0.0.2, a loopback address daphne listens on too, for clients whose resolver knows
# no *.localhost: the 0.3 suite) and conformance.localhost; at their root it serves the 0.3 card.
#
# gRPC (docs/bindings.md): `manage.py serve_grpc` on GRPC_PORT (default 50051), on 127.0.0.1 and
# the conformance agent's loopback address (a call naming no agent there reaches that agent);
# not in the embedded mode, whose background work runs on the web process's threads alone.
#
# Env: PORT (default 8000), GRPC_PORT, DATABASE_URL, REDIS_URL, AGENTSERVER_EMBEDDED=1 to
# force the embedded mode, SQLITE_PATH for its database (.data/db.sqlite3), STATIC_ROOT for
# the collected static files (staticfiles/). Logs go to RUN_DIR (.run/).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

PORT="${PORT:-8000}"
GRPC_PORT="${GRPC_PORT:-50051}"
HOST=127.0.0.1
BASE="http://$HOST:$PORT"
CONFORMANCE_HOST="${CONFORMANCE_HOST:-127.0.0.2}"
mkdir -p "$RUN_DIR"

# --- process bookkeeping -----------------------------------------------------
# Background jobs of a non-interactive shell ignore SIGINT, so Ctrl-C reaches
# only this script: the EXIT trap must stop what we started, explicitly.
PIDS=()
NAMES=()
cleanup() {
  local rc=$? i pid
  # make passes its own SIGTERM on to us (and a terminal's Ctrl-C reaches the whole group):
  # a second signal must not cut the cleanup short.
  trap - EXIT
  trap '' INT TERM
  ((${#PIDS[@]})) || exit "$rc"
  echo
  log "stopping: ${NAMES[*]}"
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # Give daphne / celery (warm shutdown) up to 15 s, then force.
  for ((i = 0; i < 30; i++)); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.5
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  log "stopped"
  exit "$rc"
}
trap cleanup EXIT
# Ctrl-C and SIGTERM are the normal ways to stop: the clean stop is a success.
trap 'exit 0' INT TERM

start_bg() {  # name logfile command...
  local name=$1 logf=$2; shift 2
  "$@" >"$logf" 2>&1 &
  PIDS+=("$!")
  NAMES+=("$name")
  log "started $name (pid $!, log ${logf#"$ROOT"/})"
}

show_log() {  # file
  echo "----- last lines of ${1#"$ROOT"/} -----" >&2
  tail -n 40 "$1" >&2 || true
  echo "-----" >&2
}

# --- 1. venv -------------------------------------------------------------------
ensure_venv

# --- 2. services or embedded fallback ------------------------------------------
if [[ "${AGENTSERVER_EMBEDDED:-0}" == 1 ]]; then
  EMBEDDED=1
  log "AGENTSERVER_EMBEDDED=1 is set: using the embedded mode, not checking Postgres/Redis"
elif ensure_services && ensure_database; then
  EMBEDDED=0
else
  EMBEDDED=1
  warn "Postgres and/or Redis could not be reached or started."
  warn "FALLING BACK TO THE EMBEDDED MODE (AGENTSERVER_EMBEDDED=1):"
  warn "  database = SQLite at ${SQLITE_PATH:-.data/db.sqlite3}, background work runs in-process (no Celery worker)."
  warn "  For the full setup start Postgres ($DATABASE_URL) and Redis ($REDIS_URL), then re-run 'make run'."
fi
if ((EMBEDDED)); then
  export AGENTSERVER_EMBEDDED=1
  export SQLITE_PATH="${SQLITE_PATH:-$ROOT/.data/db.sqlite3}"
  mkdir -p "$(dirname "$SQLITE_PATH")"
else
  # An AGENTSERVER_EMBEDDED=0 left in the environment must not confuse the app.
  unset AGENTSERVER_EMBEDDED
fi

# A server already on the port would answer our readiness probe and we would
# report success for somebody else's process.
if tcp_up "$HOST" "$PORT"; then
  die "something is already listening on $HOST:$PORT; stop it or use another port: make run PORT=8001"
fi
# A loopback address as the conformance agent's name is one more address daphne listens on.
EXTRA_ENDPOINTS=()
if [[ "$CONFORMANCE_HOST" =~ ^127\.[0-9]+\.[0-9]+\.[0-9]+$ && "$CONFORMANCE_HOST" != "$HOST" ]]; then
  tcp_up "$CONFORMANCE_HOST" "$PORT" && die "something is already listening on $CONFORMANCE_HOST:$PORT"
  EXTRA_ENDPOINTS=(-e "tcp:port=$PORT:interface=$CONFORMANCE_HOST")
fi
if ((EMBEDDED)); then
  GRPC_PORT=0
  warn "no gRPC in the embedded mode (its background work runs on daphne's threads alone)"
else
  tcp_up "$HOST" "$GRPC_PORT" && die "something is already listening on $HOST:$GRPC_PORT; use another: make run GRPC_PORT=50052"
fi
# daphne's cards list the gRPC interface when GRPC_PORT is set: exported for both processes.
export GRPC_PORT
GRPC_BINDS=(--bind "$HOST")
[[ ${#EXTRA_ENDPOINTS[@]} -gt 0 ]] && GRPC_BINDS+=(--bind "$CONFORMANCE_HOST")

# --- 3. migrate, seed, start ---------------------------------------------------
# Hosted agents' cards in the directory name this server.
export REGISTRY_HOSTED_BASE_URL="${REGISTRY_HOSTED_BASE_URL:-http://$HOST:$PORT}"
# A webhook agent under development usually answers on plain http (its address must still be
# allowed: OUTBOUND_ALLOW_NETS=127.0.0.1/32 for one on this machine).
export WEBHOOK_ALLOW_HTTP="${WEBHOOK_ALLOW_HTTP:-1}"
# Prometheus (docs/operations.md): web, the worker's children and the group runner count into
# one directory, emptied at each start; /metrics sums it.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$RUN_DIR/metrics}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
export METRICS_ENABLED="${METRICS_ENABLED:-1}"
# No METRICS_TOKEN on this machine: the server listens on loopback only (docs/operations.md).
export METRICS_PUBLIC="${METRICS_PUBLIC:-1}"
# Async executors' runs (a tenant's installed ones; the echo is still sync) go to the run host, a worker of its own whose
# threads hand each run to one asyncio loop: a run that waits costs a coroutine, not a process
# (docs/architecture.md, "The run host"). Exported for the web processes, which send them there.
((EMBEDDED)) || export ASYNC_RUNS_QUEUE="${ASYNC_RUNS_QUEUE:-agentserver-runs}"
RUN_HOST_THREADS="${RUN_HOST_THREADS:-1000}"
log "migrating (log: ${RUN_DIR#"$ROOT"/}/migrate.log)"
"$VPY" manage.py migrate --noinput >"$RUN_DIR/migrate.log" 2>&1 \
  || { show_log "$RUN_DIR/migrate.log"; die "manage.py migrate failed"; }

log "seeding the demo tenant (manage.py seed_demo --json)"
# The demo key is kept in RUN_DIR and used again while it works (one valid key, not one more per
# run); so is the password of the development superuser `admin`, made on the first run. Both are
# this machine's: no image or deployment runs this script.
KEY_FILE="$RUN_DIR/demo-key"
ADMIN_FILE="$RUN_DIR/admin-password"
# The directory lists hosted agents once a curator approves them; the demo's are approved here.
# The conformance agent at its own names: the 0.3 suite and 0.3 clients read the card at a
# host's root, without naming a version (docs/tenancy.md). One process for all of it.
"$VPY" manage.py seed_demo --json --key-file "$KEY_FILE" --admin-file "$ADMIN_FILE" \
  --approve "the demo agents, listed by make run" \
  --bind-conformance "$CONFORMANCE_HOST" --bind-conformance conformance.localhost \
  >"$RUN_DIR/seed.json" 2>"$RUN_DIR/seed.log" \
  || { show_log "$RUN_DIR/seed.log"; die "manage.py seed_demo failed"; }

# seed_demo prints one JSON object; tolerate stray lines around it. Emits
# shell-safe assignments: API_KEY, KEY_HEADER, TENANT, ADMIN_USER, ADMIN_PASSWORD, AGENT_NAMES,
# AGENT_<name>.
SEED_VARS="$("$VPY" - "$RUN_DIR/seed.json" <<'EOF'
import json, shlex, sys
text = open(sys.argv[1]).read()
try:
    data = json.loads(text)
except ValueError:
    data = None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
                break
            except ValueError:
                pass
if not isinstance(data, dict) or "agents" not in data:
    sys.exit("seed_demo --json printed no JSON object with 'agents':\n" + text[-2000:])
agents = data["agents"]
print("API_KEY=" + shlex.quote(str(data.get("api_key", ""))))
print("KEY_HEADER=" + shlex.quote(str(data.get("api_key_header") or "X-API-Key")))
print("TENANT=" + shlex.quote(str(data.get("tenant", ""))))
admin = data.get("admin") or {}
print("ADMIN_USER=" + shlex.quote(str(admin.get("username") or "")))
print("ADMIN_PASSWORD=" + shlex.quote(str(admin.get("password") or "")))
print("AGENT_NAMES=" + shlex.quote(" ".join(agents)))
for name, path in agents.items():
    if name.isidentifier():
        print("AGENT_%s=%s" % (name, shlex.quote(path)))
EOF
)" || die "could not read the seed output (${RUN_DIR#"$ROOT"/}/seed.json)"
eval "$SEED_VARS"
# The probe and the example use echo if present, else the first agent.
FIRST_AGENT="${AGENT_NAMES%% *}"
PROBE_AGENT_VAR="AGENT_echo"; [[ -n "${AGENT_echo:-}" ]] || PROBE_AGENT_VAR="AGENT_$FIRST_AGENT"
PROBE_PATH="${!PROBE_AGENT_VAR}"
CARD_URL="$BASE${PROBE_PATH}.well-known/agent-card.json"

# The admin's pages link their CSS and JS by the hashed names collectstatic writes (WhiteNoise
# serves them): without this they cannot be rendered. Re-run each time, so the files follow the
# code; unchanged files are not copied again.
log "collecting static files (manage.py collectstatic, log: ${RUN_DIR#"$ROOT"/}/collectstatic.log)"
"$VPY" manage.py collectstatic --noinput >"$RUN_DIR/collectstatic.log" 2>&1 \
  || { show_log "$RUN_DIR/collectstatic.log"; die "manage.py collectstatic failed"; }

start_bg web "$RUN_DIR/web.log" \
  "$VENV/bin/daphne" -b "$HOST" -p "$PORT" "${EXTRA_ENDPOINTS[@]}" agentserver.asgi:application
if ((EMBEDDED == 0)); then
  start_bg grpc "$RUN_DIR/grpc.log" "$VPY" manage.py serve_grpc --port "$GRPC_PORT" "${GRPC_BINDS[@]}"
  # -B runs beat (the sweeper) inside the worker: one process less for dev.
  # Its schedule file goes to .run/ rather than the repo root.
  start_bg worker "$RUN_DIR/worker.log" \
    "$VENV/bin/celery" -A agentserver worker -B -l info \
    -s "$RUN_DIR/celerybeat-schedule"
  # The run host: the threads pool on the async runs' queue only (tasks_app/runhost.py).
  start_bg runhost "$RUN_DIR/runhost.log" \
    "$VENV/bin/celery" -A agentserver worker -l info -P threads -c "$RUN_HOST_THREADS" \
    -Q "$ASYNC_RUNS_QUEUE" -n "runhost@%h"
  # AIP group mode (docs/groups.md): consumes the groups the hosted agents joined. It needs no
  # broker to start; each membership names its own.
  start_bg groups "$RUN_DIR/groups.log" "$VPY" manage.py aip_groups
fi

log "waiting for $CARD_URL"
ready=0
for ((i = 0; i < 120; i++)); do
  kill -0 "${PIDS[0]}" 2>/dev/null || { show_log "$RUN_DIR/web.log"; die "daphne exited during start-up"; }
  if "$VPY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' \
      "$CARD_URL" >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.5
done
((ready)) || { show_log "$RUN_DIR/web.log"; die "no answer from $CARD_URL after 60 s"; }

# --- 4. tell the user ------------------------------------------------------------
{
  echo
  echo "${_B}agentserver is running on $BASE${_N}"
  if ((EMBEDDED)); then
    echo "  mode: ${_Y}EMBEDDED${_N} (SQLite at ${SQLITE_PATH#"$ROOT"/}, background work in-process, no Celery worker)"
  else
    echo "  mode: Postgres + Redis, Celery worker with beat, run host ($RUN_HOST_THREADS waiting runs of async agents, queue $ASYNC_RUNS_QUEUE), AIP group runner"
  fi
  echo
  echo "  Agents (tenant ${TENANT:-?}):"
  for name in $AGENT_NAMES; do
    var="AGENT_$name"
    [[ -n "${!var:-}" ]] || continue
    printf '    %-12s %s\n' "$name" "$BASE${!var}"
    printf '    %-12s %s\n' "" "card: $BASE${!var}.well-known/agent-card.json"
  done
  if ((GRPC_PORT)); then
    echo
    echo "  gRPC (A2A 1.0, lf.a2a.v1.A2AService): $HOST:$GRPC_PORT, the agent named by the metadata agentserver-agent: ${TENANT:-<tenant>}/<agent>"
    echo "    the conformance agent with no metadata: $CONFORMANCE_HOST:$GRPC_PORT (tck/run.sh http://$CONFORMANCE_HOST:$PORT/agents/${TENANT:-demo}/conformance --transport jsonrpc,http_json,grpc)"
  fi
  echo
  echo "  The conformance agent at its own host names (its card at the root, A2A 0.3's):"
  echo "    http://$CONFORMANCE_HOST:$PORT/.well-known/agent-card.json   http://conformance.localhost:$PORT/"
  echo "    the A2A 0.3 conformance suite (tck03/run.sh) takes http://conformance.localhost:$PORT as its URL (docs/dialects.md)"
  echo
  echo "  API key (header $KEY_HEADER): $API_KEY   (kept in ${KEY_FILE#"$ROOT"/}: the same on every run)"
  echo
  echo "  Try:"
  echo "    curl -s $BASE$PROBE_PATH -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' -H '$KEY_HEADER: $API_KEY' -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\",\"params\":{\"message\":{\"messageId\":\"m1\",\"role\":\"ROLE_USER\",\"parts\":[{\"text\":\"hello\"}]}}}'"
  echo "    curl -s $BASE${PROBE_PATH}aip/rpc -H 'Content-Type: application/json' -H '$KEY_HEADER: $API_KEY' -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"rpc\",\"params\":{\"message\":{\"type\":\"message\",\"id\":\"m1\",\"sentAt\":\"$(date -Iseconds)\",\"senderRole\":\"leader\",\"senderId\":\"me\",\"command\":\"start\",\"dataItems\":[{\"type\":\"text\",\"text\":\"hello\"}],\"taskId\":\"task-1\",\"sessionId\":\"s1\"}}}'   (ACPs AIP)"
  echo
  if [[ -n "$ADMIN_PASSWORD" ]]; then
    echo "  Admin: $BASE/admin/   user $ADMIN_USER   password $ADMIN_PASSWORD   (kept in ${ADMIN_FILE#"$ROOT"/})"
  else
    echo "  Admin: $BASE/admin/   user $ADMIN_USER   (password not shown: it is not the one kept in ${ADMIN_FILE#"$ROOT"/}; set one with manage.py changepassword $ADMIN_USER)"
  fi
  echo "    Tasks: $BASE/admin/tasks_app/task/ (each task's page from there; the curl above makes one)"
  echo "  Directory: $BASE/registry/   API: $BASE/api/registry/agents/   schema: $BASE/api/schema/"
  echo "  Tenant API: $BASE/api/v1/tenants/${TENANT:-<tenant>}/ with a management key (manage.py create_api_key ${TENANT:-<tenant>} --management-role owner; docs/api.md)"
  echo "  API docs page: $BASE/api/docs/"
  echo
  echo "  Logs: ${RUN_DIR#"$ROOT"/}/web.log$( ((EMBEDDED)) || echo " ${RUN_DIR#"$ROOT"/}/grpc.log ${RUN_DIR#"$ROOT"/}/worker.log ${RUN_DIR#"$ROOT"/}/runhost.log ${RUN_DIR#"$ROOT"/}/groups.log")"
} | tee "$RUN_DIR/info.txt"
echo "  Press Ctrl-C to stop."

# --- stay in the foreground --------------------------------------------------------
# Returns when any child exits (or a signal arrives: the traps take over).
set +e
wait -n "${PIDS[@]}"
set -e
for i in "${!PIDS[@]}"; do
  if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
    show_log "$RUN_DIR/${NAMES[$i]}.log"
    die "${NAMES[$i]} exited unexpectedly; stopping the rest"
  fi
done
