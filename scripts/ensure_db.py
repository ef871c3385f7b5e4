#!/usr/bin/env python3
"""Create the database named in DATABASE_URL if it does not exist yet.

Run with the project venv's python (scripts/lib.sh does): it uses the
project's own Postgres driver (psycopg 3, or psycopg2), so neither psql nor
createdb has to be installed. If no driver is importable it falls back to psql.

Exit status: 0 when the database exists afterwards, 1 otherwise.
"""

import os
import shutil
import subprocess
import sys
from urllib.parse import unquote, urlsplit, urlunsplit

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentserver"


def main() -> int:
    url = os.environ.get("DATABASE_URL") or DEFAULT_URL
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        print(f"ensure_db: DATABASE_URL is not a postgres URL ({parts.scheme}); nothing to do")
        return 0
    dbname = unquote(parts.path.lstrip("/")) or "postgres"
    # Connect to a maintenance database to check for / create the target one.
    admin_urls = [urlunsplit(parts._replace(path="/" + m)) for m in ("postgres", "template1")]

    for connect in (_via_psycopg, _via_psycopg2, _via_psql):
        result = connect(admin_urls, dbname)
        if result is not None:
            return result
    print("ensure_db: no Postgres driver (psycopg/psycopg2) in the venv and no psql", file=sys.stderr)
    return 1


def _ensure(conn, dbname: str) -> int:
    cur = conn.cursor()
    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,))
    if cur.fetchone():
        print(f"ensure_db: database {dbname!r} exists")
        return 0
    # Identifiers can't be parameters; quote by doubling any double quote.
    cur.execute('CREATE DATABASE "{}"'.format(dbname.replace('"', '""')))
    print(f"ensure_db: created database {dbname!r}")
    return 0


def _try_connect(connect, admin_urls):
    last = None
    for u in admin_urls:
        try:
            return connect(u)
        except Exception as exc:  # noqa: BLE001 - report the last one below
            last = exc
    raise last


def _via_psycopg(admin_urls, dbname):
    try:
        import psycopg
    except ImportError:
        return None
    try:
        # autocommit: CREATE DATABASE can't run inside a transaction.
        conn = _try_connect(lambda u: psycopg.connect(u, autocommit=True, connect_timeout=5), admin_urls)
        with conn:
            return _ensure(conn, dbname)
    except Exception as exc:  # noqa: BLE001
        print(f"ensure_db: {exc}", file=sys.stderr)
        return 1


def _via_psycopg2(admin_urls, dbname):
    try:
        import psycopg2
    except ImportError:
        return None
    try:
        conn = _try_connect(lambda u: psycopg2.connect(u, connect_timeout=5), admin_urls)
        conn.autocommit = True
        try:
            return _ensure(conn, dbname)
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001
        print(f"ensure_db: {exc}", file=sys.stderr)
        return 1


def _via_psql(admin_urls, dbname):
    psql = shutil.which("psql")
    if not psql:
        return None
    lit = dbname.replace("'", "''")
    for u in admin_urls:
        q = subprocess.run(
            [psql, u, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{lit}'"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if q.returncode != 0:
            continue
        if q.stdout.strip() == "1":
            print(f"ensure_db: database {dbname!r} exists")
            return 0
        ident = dbname.replace('"', '""')
        c = subprocess.run([psql, u, "-qc", f'CREATE DATABASE "{ident}"'], stdin=subprocess.DEVNULL)
        if c.returncode == 0:
            print(f"ensure_db: created database {dbname!r}")
        return 0 if c.returncode == 0 else 1
    print("ensure_db: psql could not connect", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
