# shellcheck shell=bash
# Shared helpers for scripts/run.sh and scripts/test.sh. Source it, don't run it.
#
# It knows how to:
#   - build/refresh the project venv (.venv) only when requirements.txt changed,
#   - tell whether Postgres / Redis from DATABASE_URL / REDIS_URL answer,
#   - start the machine's own Postgres / Redis when they don't (and the start
#     commands exist), never failing just because a command is missing,
#   - create the database named in DATABASE_URL,
#   - install Chromium and ChromeDriver for the browser test when they are missing.
#
# Only bash, coreutils and the system python3 are assumed: this must work on a
# fresh Debian machine before the venv exists.

# --- locations ---------------------------------------------------------------
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
# Logs and state of `make run` (RUN_DIR=… puts them elsewhere, as the tests do).
RUN_DIR="${RUN_DIR:-$ROOT/.run}"
REQS="$ROOT/requirements.txt"
# The stamp holds the hash of requirements.txt (plus the interpreter version)
# the venv was last installed from; a match means "nothing to do".
STAMP="$VENV/.requirements.stamp"
PYTHON="${PYTHON:-python3}"

# Defaults match the application's settings; exporting them makes the checks
# below and the app itself look at the very same servers.
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/agentserver}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"

# --- output ------------------------------------------------------------------
# Colour only on a terminal, so CI logs stay clean.
if [[ -t 1 ]]; then
  _B=$'\e[1m'; _Y=$'\e[33m'; _R=$'\e[31m'; _G=$'\e[32m'; _N=$'\e[0m'
else
  _B=""; _Y=""; _R=""; _G=""; _N=""
fi
log()  { printf '%s==>%s %s\n' "$_B" "$_N" "$*"; }
ok()   { printf '%s==>%s %s\n' "$_G" "$_N" "$*"; }
warn() { printf '%s==> WARNING:%s %s\n' "$_Y" "$_N" "$*" >&2; }
die()  { printf '%s==> ERROR:%s %s\n' "$_R" "$_N" "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

# --- venv ----------------------------------------------------------------------
requirements_hash() {
  # Interpreter version is part of the hash: a new python3 needs a new venv.
  { cat "$REQS" "$ROOT/constraints.txt"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1
}

_ensure_venv_locked() {
  local want have_stamp=""
  want="$(requirements_hash)"
  [[ -f "$STAMP" ]] && have_stamp="$(cat "$STAMP")"

  # A venv whose python no longer runs (moved tree, removed interpreter) is
  # rebuilt from scratch rather than patched.
  if [[ -d "$VENV" ]] && ! "$VPY" -c 'pass' >/dev/null 2>&1; then
    warn ".venv is broken; recreating it"
    rm -rf "$VENV"
    have_stamp=""
  fi
  # pip can't move a venv to another interpreter: a different Python means
  # a fresh venv.
  if [[ -x "$VPY" && "$("$VPY" -c 'import sys; print(sys.version)')" != "$("$PYTHON" -c 'import sys; print(sys.version)')" ]]; then
    warn ".venv was made with another Python than $PYTHON; recreating it"
    rm -rf "$VENV"
    have_stamp=""
  fi

  if [[ -x "$VPY" && "$have_stamp" == "$want" ]]; then
    log "venv up to date (.venv matches requirements.txt)"
    return 0
  fi

  if [[ ! -x "$VPY" ]]; then
    log "creating venv at .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV" \
      || die "could not create .venv; on Debian: apt-get install python3-venv"
  fi
  log "installing requirements.txt into .venv (only happens when requirements.txt changes)"
  # No stdin in CI: pip must never prompt. Version check only adds noise.
  "$VPY" -m pip install --disable-pip-version-check --no-input -q -r "$REQS" </dev/null \
    || die "pip install -r requirements.txt failed (see output above)"
  # Written last, so an interrupted install is retried next time.
  printf '%s\n' "$want" > "$STAMP"
  ok "venv ready"
}

ensure_venv() {
  [[ -f "$REQS" ]] || die "requirements.txt not found in $ROOT"
  have "$PYTHON" || die "$PYTHON not found; install Python 3.11 (apt-get install python3 python3-venv)"
  local ver
  ver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [[ "$ver" == "3.11" ]] || warn "$PYTHON is Python $ver; the project targets 3.11 (set PYTHON=python3.11 to choose another)"
  # `make run` and `make test` may start at the same time; one pip at a time.
  if have flock; then
    mkdir -p "$ROOT/.run"
    (
      flock 9
      _ensure_venv_locked
    ) 9>"$ROOT/.run/venv.lock"
  else
    _ensure_venv_locked
  fi
}

# --- URL parsing -------------------------------------------------------------
# Prints "host port" of a URL, with the scheme's default port when none is given.
url_host_port() {
  "$PYTHON" - "$1" "$2" <<'EOF'
import sys
from urllib.parse import urlsplit
u = urlsplit(sys.argv[1])
print(u.hostname or "127.0.0.1", u.port or int(sys.argv[2]))
EOF
}

# True when host is this machine: only then can we start the server ourselves.
is_local_host() {
  case "$1" in 127.*|localhost|::1|0.0.0.0) return 0 ;; *) return 1 ;; esac
}

# --- reachability ------------------------------------------------------------
tcp_up() {  # host port
  # shellcheck disable=SC2016  # $0/$1 expand in the inner bash, on purpose
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" >/dev/null 2>&1
}

postgres_up() {
  local host port
  read -r host port < <(url_host_port "$DATABASE_URL" 5432)
  if have pg_isready; then
    # Exit 0 = accepting connections; 1 = still starting up, not good enough.
    pg_isready -q -h "$host" -p "$port" -t 3 >/dev/null 2>&1
  else
    tcp_up "$host" "$port"
  fi
}

redis_up() {
  local host port
  read -r host port < <(url_host_port "$REDIS_URL" 6379)
  if have redis-cli; then
    [[ "$(timeout 3 redis-cli -u "$REDIS_URL" ping 2>/dev/null)" == "PONG" ]]
  else
    tcp_up "$host" "$port"
  fi
}

# Poll a check function for up to $2 seconds.
wait_for() {  # check_fn seconds
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    "$1" && return 0
    sleep 0.5
  done
  return 1
}

# --- starting the machine's own services ------------------------------------
# The start commands bring up the machine's standard instances on the standard
# ports. They can't help a URL that points elsewhere (another host or port), so
# we only try them when the URL names the local standard port; this also keeps
# us from e.g. starting a stray Redis on whatever port a URL happens to name.

start_postgres() {
  local host port started=0 conf ver
  read -r host port < <(url_host_port "$DATABASE_URL" 5432)
  if ! is_local_host "$host" || [[ "$port" != 5432 ]]; then
    warn "Postgres at $host:$port is not reachable and is not the local standard instance; not starting anything"
    return 1
  fi
  if ! have pg_ctlcluster || [[ ! -d /etc/postgresql ]]; then
    warn "Postgres is not reachable and pg_ctlcluster is not installed; cannot start it"
    return 1
  fi
  # One directory per installed major version; start each version's "main".
  for conf in /etc/postgresql/*/main; do
    [[ -d "$conf" ]] || continue
    ver="$(basename "$(dirname "$conf")")"
    log "starting Postgres $ver (pg_ctlcluster $ver main start)"
    # --skip-systemctl-redirect: there is no systemd on these machines.
    if pg_ctlcluster --skip-systemctl-redirect "$ver" main start; then
      started=1
    else
      warn "pg_ctlcluster $ver main start failed"
    fi
  done
  ((started)) || return 1
  wait_for postgres_up 20
}

start_redis() {
  local host port dir logfile
  read -r host port < <(url_host_port "$REDIS_URL" 6379)
  if ! is_local_host "$host" || [[ "$port" != 6379 ]]; then
    warn "Redis at $host:$port is not reachable and is not the local standard instance; not starting anything"
    return 1
  fi
  if ! have redis-server; then
    warn "Redis is not reachable and redis-server is not installed; cannot start it"
    return 1
  fi
  # The machine's usual places; if they're missing or not ours to write, keep
  # Redis's (tiny, persistence is off) files under .run/ instead.
  dir=/var/lib/redis
  logfile=/var/log/redis/ci.log
  if [[ ! -d "$dir" || ! -w "$dir" ]]; then dir="$RUN_DIR/redis"; mkdir -p "$dir"; fi
  if [[ ! -d "$(dirname "$logfile")" || ! -w "$(dirname "$logfile")" ]]; then
    mkdir -p "$RUN_DIR"; logfile="$RUN_DIR/redis.log"
  fi
  log "starting Redis on 127.0.0.1:6379 (log: $logfile)"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 \
    --save "" --appendonly no --dir "$dir" --logfile "$logfile" \
    || { warn "redis-server failed to start (see $logfile)"; return 1; }
  wait_for redis_up 10
}

# Make sure each service answers, starting it if we can. Returns non-zero if
# any is still unreachable; the caller decides whether that's fatal.
ensure_services() {
  local rc=0
  if postgres_up; then
    ok "Postgres is up ($(url_host_port "$DATABASE_URL" 5432 | tr ' ' :))"
  elif start_postgres; then
    ok "Postgres started"
  else
    warn "Postgres is not reachable at $(url_host_port "$DATABASE_URL" 5432 | tr ' ' :)"
    rc=1
  fi
  if redis_up; then
    ok "Redis is up ($(url_host_port "$REDIS_URL" 6379 | tr ' ' :))"
  elif start_redis; then
    ok "Redis started"
  else
    warn "Redis is not reachable at $(url_host_port "$REDIS_URL" 6379 | tr ' ' :)"
    rc=1
  fi
  return $rc
}

# Create the database named in DATABASE_URL if it's missing (needs the venv:
# uses the project's own Postgres driver, so psql need not be installed).
ensure_database() {
  "$VPY" "$ROOT/scripts/ensure_db.py"
}

# --- a browser for tests/test_admin_browser.py -----------------------------------------------
# Debian's chromium and chromium-driver, installed when missing and we can: apt-get is there and
# we are root (CI machines are). Never fatal: the browser test itself fails and says what is
# missing; AGENTSERVER_NO_BROWSER=1 (a machine that cannot have a browser) skips both.
ensure_browser() {
  if [[ "${AGENTSERVER_NO_BROWSER:-0}" == 1 ]]; then
    log "AGENTSERVER_NO_BROWSER=1: not installing a browser; the browser test is skipped"
    return 0
  fi
  if have chromium && have chromedriver; then
    return 0
  fi
  if ! have apt-get || [[ "$(id -u)" != 0 ]]; then
    warn "chromium and chromium-driver are missing and cannot be installed here (needs apt-get as root):"
    warn "  the browser test will fail. Install them, or set AGENTSERVER_NO_BROWSER=1 to skip it."
    return 0
  fi
  local logf="$RUN_DIR/apt-browser.log"
  mkdir -p "$RUN_DIR"
  log "installing chromium and chromium-driver for the browser test (apt-get, log: ${logf#"$ROOT"/})"
  # The package lists may be missing or stale on a fresh machine: refresh them once if needed.
  if ! _apt_install_browser >"$logf" 2>&1; then
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq && _apt_install_browser; } >>"$logf" 2>&1 \
      || { tail -n 20 "$logf" >&2; warn "could not install chromium/chromium-driver; the browser test will fail"; return 0; }
  fi
  ok "chromium installed ($(chromium --version 2>/dev/null | head -n1))"
}

# Of chromium's recommended packages only the fonts: pages and screenshots need them, while
# upower, udev or printer settings have no use in a headless test.
_apt_install_browser() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver fonts-liberation </dev/null
}
