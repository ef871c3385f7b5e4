"""The admin's CSS and JS as production serves them: `collectstatic` stores each file again under a
name carrying a hash of its content, the pages link to those names, and WhiteNoise serves them
to be kept for good. The suite itself runs without a collectstatic (STATIC_FROM_APPS=1 in
agentserver/test_settings.py); these tests collect into a folder of their own.

`make run` collects before it starts daphne, in both of its modes: the last tests run it."""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import override_settings

from tests.conftest import _free_port
from tests.test_run_script import ROOT, _lines_of, _read_until

MANIFEST_STORAGE = "whitenoise.storage.CompressedManifestStaticFilesStorage"
FOREVER = "max-age=315360000, public, immutable"
# How the admin's pages link the stylesheet, by plain or hashed name.
BASE_CSS_LINK = re.compile(r'href="(/static/admin/css/base(?:\.[0-9a-f]{12})?\.css)"')


def production_static(static_root: Path) -> dict:
    """The static settings of agentserver/settings.py without STATIC_FROM_APPS."""
    return {
        "STATIC_ROOT": static_root,
        "STORAGES": {**django_settings.STORAGES, "staticfiles": {"BACKEND": MANIFEST_STORAGE}},
        "WHITENOISE_USE_FINDERS": False,
        "WHITENOISE_AUTOREFRESH": False,
    }


def collect_static(static_root: Path) -> Path:
    """`manage.py collectstatic --noinput` into `static_root`, with the production storage."""
    with override_settings(**production_static(static_root)):
        call_command("collectstatic", "--noinput", verbosity=0)
    return static_root


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    return collect_static(tmp_path_factory.mktemp("staticfiles"))


@pytest.fixture
def production(collected, settings):
    for name, value in production_static(collected).items():
        setattr(settings, name, value)
    return collected


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_whitenoise_answers_right_after_the_security_middleware():
    # Only a request on a host name bound to an agent is answered before them, by the agent's
    # view, as daphne's router answers it (protocols.hosts): it serves no static files.
    assert django_settings.MIDDLEWARE[:3] == [
        "protocols.hosts.BoundHostMiddleware",
        "django.middleware.security.SecurityMiddleware",
        "whitenoise.middleware.WhiteNoiseMiddleware",
    ]


@pytest.mark.django_db
def test_collected_files_are_served_under_hashed_names_to_be_kept_for_good(production, client):
    manifest = (production / "staticfiles.json").read_text()
    login = client.get("/admin/login/")
    assert login.status_code == 200
    css_url = BASE_CSS_LINK.search(login.content.decode()).group(1)
    assert css_url != "/static/admin/css/base.css" and css_url.removeprefix("/static/") in manifest

    hashed = client.get(css_url)
    assert hashed.status_code == 200
    assert hashed["Content-Type"].startswith("text/css")
    assert hashed["Cache-Control"] == FOREVER
    # The collected copy, whose own links (url(...)) name hashed files too.
    css = body(hashed)
    assert css == (production / css_url.removeprefix("/static/")).read_bytes()

    # The plain name still answers, but for a minute only: its content changes with a release.
    plain = client.get("/static/admin/css/base.css")
    assert plain.status_code == 200 and plain["Content-Type"].startswith("text/css")
    assert plain["Cache-Control"] == "max-age=60, public"

    # Compressed once, at collectstatic, for whoever accepts it.
    zipped = client.get(css_url, headers={"Accept-Encoding": "gzip"})
    assert zipped["Content-Encoding"] == "gzip" and zipped["Vary"] == "Accept-Encoding"
    assert gzip.decompress(body(zipped)) == css


@pytest.mark.django_db
def test_without_a_collectstatic_the_tests_serve_the_apps_own_files(client):
    login = client.get("/admin/login/").content.decode()
    assert BASE_CSS_LINK.search(login).group(1) == "/static/admin/css/base.css"
    css = client.get("/static/admin/css/base.css")
    assert css.status_code == 200 and css["Content-Type"].startswith("text/css")
    assert b"--header-bg" in body(css)


@pytest.mark.django_db
def test_a_file_that_is_not_there_is_not_found(production, client):
    assert client.get("/static/admin/css/no-such-file.css").status_code == 404


# --- `make run` -------------------------------------------------------------------------------


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _drop_database(name: str) -> None:
    from tests.conftest import own_session

    with own_session() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.live
@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["embedded", "postgres-redis"])
def test_make_run_collects_the_static_files_and_serves_the_admin_styled(tmp_path, mode):
    port = _free_port()
    static_root = tmp_path / "staticfiles"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "LANG": "C.UTF-8",
        "PORT": str(port),
        "RUN_DIR": str(tmp_path / "run"),
        "STATIC_ROOT": str(static_root),
    }
    database = f"agentserver_static_{uuid.uuid4().hex[:12]}"
    if mode == "embedded":
        env |= {"AGENTSERVER_EMBEDDED": "1", "SQLITE_PATH": str(tmp_path / "db.sqlite3")}
    else:
        # A database and a queue of its own, on the suite's Redis database: this worker takes
        # nobody else's work.
        db = django_settings.DATABASES["default"]
        host, db_port, user = db["HOST"] or "127.0.0.1", db["PORT"] or 5432, db["USER"] or "postgres"
        env |= {
            "DATABASE_URL": f"postgres://{user}@{host}:{db_port}/{database}",
            "REDIS_URL": os.environ["REDIS_URL"],
            "CELERY_QUEUE": f"agentserver-static-{uuid.uuid4().hex[:8]}",
        }
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out = _read_until(_lines_of(proc), "Press Ctrl-C to stop.", timeout=150)
        assert ("mode: EMBEDDED" in out) == (mode == "embedded"), out
        assert "collecting static files" in out, out
        assert (static_root / "staticfiles.json").is_file()

        base = f"http://127.0.0.1:{port}"
        status, _, login = _get(f"{base}/admin/login/")
        assert status == 200
        css_url = BASE_CSS_LINK.search(login.decode()).group(1)
        assert css_url != "/static/admin/css/base.css"
        status, headers, css = _get(base + css_url)
        assert status == 200, css[:500]
        assert headers["Content-Type"].startswith("text/css") and headers["Cache-Control"] == FOREVER
        assert css == (static_root / css_url.removeprefix("/static/")).read_bytes()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            if mode != "embedded":
                _drop_database(database)
