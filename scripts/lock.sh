#!/usr/bin/env bash
# `make lock`: pin in constraints.txt every package that requirements.txt pulls in.
#
# Resolves requirements.txt afresh (without the old constraints) in a throwaway venv, and
# writes what pip chose, minus the direct dependencies (pinned in requirements.txt itself).
# Run it after changing requirements.txt, then `make test` with the new venv.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "resolving requirements.txt in a fresh venv"
"$PYTHON" -m venv "$tmp/venv"
grep -v '^-c ' "$REQS" >"$tmp/requirements.txt"
"$tmp/venv/bin/pip" install --disable-pip-version-check --no-input -q -r "$tmp/requirements.txt" </dev/null
"$tmp/venv/bin/pip" freeze --disable-pip-version-check >"$tmp/freeze.txt"
"$PYTHON" - "$tmp/requirements.txt" "$tmp/freeze.txt" >"$ROOT/constraints.txt" <<'PY'
import re
import sys

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

direct = {norm(re.split(r"[\[=<>~!; ]", line.strip())[0])
          for line in open(sys.argv[1]) if line.strip() and not line.lstrip().startswith(("#", "-"))}
print("# Every package that requirements.txt pulls in, at the version the suite last passed with:")
print("# `pip install -r requirements.txt` reads this file (its first line) so that a fresh venv is")
print("# the tested one. Regenerate after changing requirements.txt: `make lock`.")
for line in open(sys.argv[2]):
    name = line.split("==")[0]
    if "==" in line and norm(name) not in direct and norm(name) not in {"pip", "setuptools", "wheel"}:
        print(line.strip())
PY
ok "constraints.txt: $(grep -vc '^#' constraints.txt) packages pinned"
