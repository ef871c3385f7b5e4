"""The README's promises to a newcomer, and the first hour they describe.

The page: its Quick start is the two commands, then a `curl`, an a2a-sdk client and the admin's
login; it says nothing dated or measured, points at nothing outside the repository, links only
files that exist, and shows the agent docs/executors.md shows.

The path, live: `make run` on a database of its own, then what its banner says, followed as
printed: its `curl`, the admin's login in headless Chromium, the task that curl made, the
directory and an agent's card there, and the API's docs page; and the README's own `curl` and
client, as printed but for the port and the run directory."""

from __future__ import annotations

import ast
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import test_admin_browser
from tests.conftest import ROOT, _free_port

README = (ROOT / "README.md").read_text()
EXECUTORS = (ROOT / "docs" / "executors.md").read_text()
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)

browser = test_admin_browser.browser  # the fixture: headless Chromium


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


# --- the page -----------------------------------------------------------------------------------


def test_the_quick_start_is_the_two_commands_then_a_curl_a_client_and_the_admin_login():
    quick = section("Quick start")
    first_block = re.search(r"\n\n((?:    .*\n)+)", quick)
    assert first_block is not None and first_block.group(1) == "    make run\n    make test\n"
    blocks = FENCE.findall(quick)
    assert [lang for lang, _ in blocks] == ["bash", "bash"]
    assert blocks[0][1].startswith("curl -s http://127.0.0.1:8000/agents/demo/echo/")
    assert '"X-API-Key: $(cat .run/demo-key)"' in blocks[0][1]  # where the key comes from
    assert blocks[1][1].startswith(".venv/bin/python - <<'EOF'\n") and "from a2a.client import" in blocks[1][1]
    assert "http://127.0.0.1:8000/admin/" in quick and "sign in as `admin`" in quick
    assert ".run/admin-password" in quick


def test_the_readme_holds_no_date_no_measurement_and_no_path_outside_the_repository():
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README)
    assert not re.search(r"req/s|\bp\d\d\b|\d\s?ms\b|\bUTC\b", README)
    assert "../" not in README and "/work/" not in README and "shared/" not in README
    assert len(README.splitlines()) < 160


def test_every_file_the_readme_links_is_in_the_repository_and_the_settings_table_is_one_of_them():
    linked = re.findall(r"\]\(([^)#]+)\)", README)
    assert "docs/configuration.md" in linked and "bench/README.md" in linked
    assert [path for path in linked if not (ROOT / path).is_file()] == []
    # Settings are the table's, not the README's prose.
    assert "RATE_LIMIT_PER_MINUTE" not in README and "PUSH_BACKOFF_BASE" not in README


def test_writing_an_agent_shows_the_executor_docs_executors_md_shows():
    readme = FENCE.findall(section("Writing an agent"))
    docs = FENCE.findall(EXECUTORS)
    assert readme[0] == ("python", docs[0][1]) == docs[0]
    tree = ast.parse(readme[0][1])
    assert not any(isinstance(n, ast.ClassDef) and n.decorator_list for n in ast.walk(tree))
    from tasks_app.executors import AgentContext

    verbs = re.search(r"the verbs (.*?)\)", section("Writing an agent"), re.S)
    assert verbs is not None
    named = re.findall(r"`(\w+)`", verbs.group(1))
    assert named == ["working", "artifact", "require_input", "complete", "fail", "reject", "reply"]
    assert all(callable(getattr(AgentContext, verb)) for verb in named)
    assert all(f"`{verb}`" in EXECUTORS.split("\n\n")[1] for verb in named)


# --- the path, live -----------------------------------------------------------------------------


def _lines_of(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _read_until(lines: queue.Queue, marker: str, timeout: float) -> str:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"no {marker!r} from make run in {timeout:.0f}s:\n" + "".join(seen)[-4000:])


def _said(banner: str, pattern: str) -> re.Match:
    found = re.search(pattern, banner, re.M)
    assert found is not None, f"the banner does not say {pattern!r}:\n{banner}"
    return found


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of its own for `make run` (which creates it), dropped afterwards."""
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    host, port, user = db["HOST"] or "127.0.0.1", db["PORT"] or 5432, db["USER"] or "postgres"
    name = f"{db['NAME']}_newcomer"

    def drop() -> None:
        with psycopg.connect(host=host, port=port, user=user, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    drop()
    yield f"postgres://{user}@{host}:{port}/{name}"
    drop()


@pytest.fixture
def running(tmp_path, own_database) -> Iterator[tuple[str, Path]]:
    """`make run` as a newcomer starts it (on a port, run directory and database of the test's
    own), its banner once it is up, and its run directory; stopped by Ctrl-C afterwards."""
    port, run_dir = _free_port(), tmp_path / "run"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "LANG": "C.UTF-8",
        "PORT": str(port),
        "RUN_DIR": str(run_dir),
        "DATABASE_URL": own_database,
        "REDIS_URL": os.environ["REDIS_URL"],
        # Its worker, caches and announcements apart from every other server on this Redis.
        "CELERY_QUEUE": f"agentserver-newcomer-{os.getpid()}",
        "REDIS_CHANNEL_PREFIX": f"agentserver-newcomer-{os.getpid()}:",
        "CACHE_KEY_PREFIX": f"agentserver-newcomer-{os.getpid()}",
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
    lines = _lines_of(proc)
    try:
        yield _read_until(lines, "Press Ctrl-C to stop.", timeout=300), run_dir
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _readme_block(index: int, base: str, run_dir: Path) -> str:
    """The Quick start's block `index` as printed, on the test's port and run directory."""
    _, code = FENCE.findall(section("Quick start"))[index]
    return code.replace("http://127.0.0.1:8000", base).replace(".run/", f"{run_dir}/")


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_newcomer_follows_the_banner_from_make_run_to_the_api_docs_page(running, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    banner, run_dir = running
    base = _said(banner, r"agentserver is running on (http://127\.0\.0\.1:\d+)").group(1)
    key = _said(banner, r"API key \(header X-API-Key\): (\S+)").group(1)
    assert (run_dir / "demo-key").read_text().strip() == key

    # The banner's curl, exactly as printed.
    curl = _said(banner, r"^\s+(curl -s \S+/agents/demo/echo/ .*)$").group(1)
    answer = json.loads(subprocess.run(["bash", "-c", curl], capture_output=True, text=True, check=True).stdout)
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: hello"}]

    # The README's curl and client, as printed but for the port and the run directory.
    readme_curl = subprocess.run(
        ["bash", "-c", _readme_block(0, base, run_dir)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(readme_curl.stdout)["result"]["task"]["artifacts"][0]["parts"] == [{"text": "echo: hello"}]
    client = subprocess.run(
        ["bash", "-c", _readme_block(1, base, run_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert client.stdout.strip() == "TASK_STATE_COMPLETED echo: hello from the SDK", client.stderr[-2000:]

    # The admin's login, as the banner gives it.
    admin = _said(banner, r"Admin: (\S+)\s+user (\S+)\s+password (\S+)\s+\(kept in (\S+)\)")
    admin_url, username, password = admin.group(1), admin.group(2), admin.group(3)
    assert Path(admin.group(4)).read_text().strip() == password
    wait = WebDriverWait(browser, test_admin_browser.WAIT)
    browser.delete_all_cookies()
    browser.get(admin_url)
    wait.until(ec.presence_of_element_located((By.ID, "id_username")))
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "#login-form [type=submit]").click()
    wait.until(ec.presence_of_element_located((By.ID, "user-tools")))

    # The tasks, and the page of the one the banner's curl made.
    browser.get(_said(banner, r"Tasks: (\S+)").group(1))
    wait.until(ec.presence_of_element_located((By.ID, "result_list")))
    browser.find_element(By.CSS_SELECTOR, f"#result_list a[href*='/{task['id']}/change/']").click()
    wait.until(ec.url_contains(f"/admin/tasks_app/task/{task['id']}/change/"))
    page = browser.find_element(By.ID, "content").text
    assert task["id"] in page and "echo: hello" in page
    test_admin_browser.assert_styled(browser)
    test_admin_browser.screenshot(browser, "newcomer-task")

    # The directory, an agent's page there, and the card it links.
    browser.get(_said(banner, r"Directory: (\S+)").group(1))
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".result-list")))
    browser.find_element(By.LINK_TEXT, "Echo").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "a[href$='/.well-known/agent-card.json']")))
    card_url = browser.find_element(By.CSS_SELECTOR, "a[href$='/.well-known/agent-card.json']").get_attribute("href")
    assert card_url == f"{base}/agents/demo/echo/.well-known/agent-card.json"
    with urllib.request.urlopen(card_url, timeout=10) as response:
        assert json.loads(response.read())["name"] == "Echo"
    assert browser.find_element(By.LINK_TEXT, "Submit an agent")

    # The API's docs page: both APIs' operations, rendered.
    browser.get(_said(banner, r"API docs page: (\S+)").group(1))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) > 20)
    test_admin_browser.screenshot(browser, "newcomer-api-docs")
