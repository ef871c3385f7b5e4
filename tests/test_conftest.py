"""The suite's own harness: what tests/conftest.py changes for every test."""

from __future__ import annotations

import ssl

import httpx


def _context(client: httpx.Client | httpx.AsyncClient) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # type: ignore[union-attr]


def test_clients_with_the_default_verification_share_one_tls_context():
    three = httpx.AsyncClient()  # built only: no request is made, nothing to close
    with httpx.Client() as one, httpx.Client() as two:
        assert _context(one) is _context(two) is _context(three)
        assert _context(one).verify_mode == ssl.CERT_REQUIRED and _context(one).check_hostname


def test_a_client_with_its_own_verification_gets_a_context_of_its_own():
    with httpx.Client() as default, httpx.Client(verify=False) as unverified:
        assert _context(unverified) is not _context(default)
        assert _context(unverified).verify_mode == ssl.CERT_NONE
    own = ssl.create_default_context()
    with httpx.Client(verify=own) as given:
        assert _context(given) is own


# --- one Redis server, one database per pytest-xdist worker (agentserver/test_settings.py) ---


def test_each_worker_gets_a_redis_database_and_a_limiter_database_no_other_worker_has():
    from agentserver.test_settings import _worker_redis_dbs

    for base in range(16):
        url = f"redis://127.0.0.1:6379/{base}"
        taken = [db for worker in ["", *(f"gw{n}" for n in range(8))] for db in _worker_redis_dbs(url, worker)]
        # The lone process (no xdist) and gw0 both take REDIS_URL's own database: never at once.
        assert _worker_redis_dbs(url, "") == _worker_redis_dbs(url, "gw0")
        assert len(set(taken)) == 16 and all(db.startswith("redis://127.0.0.1:6379/") for db in taken)
        assert _worker_redis_dbs(url, "gw0")[0] == url


def test_this_worker_s_redis_database_is_the_one_its_settings_and_subprocesses_use():
    import os

    from django.conf import settings

    assert settings.REDIS_URL == os.environ["REDIS_URL"] != os.environ["TEST_LIMITER_REDIS_URL"]


# --- the suite's time budget (scripts/test_budget.py, run by scripts/test.sh) --------------


def _budget(tmp_path, wall: int, budget: int):
    import subprocess
    import sys
    from pathlib import Path

    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.test_slow" name="a" time="300.5"/>'
        '<testcase classname="tests.test_slow.TestMore" name="b" time="20"/>'
        '<testcase classname="tests.test_quick" name="c" time="1.25"/>'
        "</testsuite></testsuites>"
    )
    script = Path(__file__).resolve().parent.parent / "scripts" / "test_budget.py"
    return subprocess.run(
        [sys.executable, str(script), str(junit), str(wall), str(budget)], capture_output=True, text=True, timeout=30
    )


def test_a_suite_over_its_time_budget_fails_naming_its_slowest_modules_first(tmp_path):
    done = _budget(tmp_path, wall=600, budget=540)
    assert done.returncode == 1
    assert "600 s of wall time, over its budget of 540 s" in done.stdout
    assert done.stdout.index("320.5 s  tests/test_slow.py") < done.stdout.index("1.2 s  tests/test_quick.py")
    assert "TEST_TIME_BUDGET" in done.stderr


def test_a_suite_within_its_budget_or_without_one_passes(tmp_path):
    assert _budget(tmp_path, wall=500, budget=540).returncode == 0
    assert _budget(tmp_path, wall=5000, budget=0).returncode == 0
