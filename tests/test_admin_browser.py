"""The admin in a real browser: headless Chromium, driven by Selenium through Debian's
chromium-driver, against daphne serving the test database with the static files collected as in
production (hashed names, served by WhiteNoise). It logs in, filters the task list and opens a
task, and checks that the admin's stylesheet is applied, not only linked.

`make test` installs chromium and chromium-driver when they are missing and it can (apt-get, as
root). Without them this test fails and says so; AGENTSERVER_NO_BROWSER=1 skips it instead, on a
machine known to have no browser. A screenshot of each page it checks goes to ARTIFACTS_DIR
(default test-artifacts/, git-ignored). The task list is read at 1,280 and 1,440 px and cancels
tasks in bulk. The API's docs page is checked the same way: it renders, loading nothing from
anywhere but this server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from tests.conftest import ROOT, STARTUP_TIMEOUT, _free_port, _wait_for, daphne_command, serves, user_message
from tests.test_static import collect_static

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

NO_BROWSER = "AGENTSERVER_NO_BROWSER"
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR") or ROOT / "test-artifacts")
PASSWORD = "pw-for-browser-tests-only"
# The admin's --header-bg (django/contrib/admin/static/admin/css/base.css), in the light scheme
# headless Chromium uses; with no stylesheet the header would be transparent.
ADMIN_HEADER_BG = "rgb(65, 118, 144)"
HASHED_BASE_CSS = re.compile(r"/static/admin/css/base\.[0-9a-f]{12}\.css$")
WAIT = 10  # seconds for any one page to show what is looked for


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    """daphne with the production static settings, on the test database."""
    from django.db import connection

    db = connection.settings_dict
    static_root = collect_static(tmp_path_factory.mktemp("staticfiles"))
    logs = tmp_path_factory.mktemp("browser-server")
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "DATABASE_URL": (
            f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        ),
        "STATIC_FROM_APPS": "0",
        "STATIC_ROOT": str(static_root),
        "PYTHONUNBUFFERED": "1",
        # Django's cache is Redis: a prefix of its own, so nothing an earlier test cached there
        # (the directory's filter choices) is served by this server.
        "CACHE_KEY_PREFIX": f"browser-{os.getpid()}-{port}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", *daphne_command(port)],
        cwd=ROOT,
        env=env,
        stdout=open(logs / "web.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: serves(url), STARTUP_TIMEOUT, "daphne", logs)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if os.environ.get(NO_BROWSER) == "1":
        pytest.skip(f"{NO_BROWSER}=1: no browser on this machine")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.fail(
            "the admin browser test needs Chromium and ChromeDriver on PATH "
            f"(found chromium={chromium}, chromedriver={chromedriver}). `make test` installs them when it "
            "runs as root with apt-get; otherwise: apt-get install chromium chromium-driver. "
            f"On a machine that cannot have them, set {NO_BROWSER}=1 to skip this test.",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException

    profile = tempfile.mkdtemp(prefix="agentserver-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root on CI machines
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={profile}",
        # Nothing but the test's server: no update checks, sync, QUIC probes or lookups.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--no-first-run",
        "--disable-default-apps",
        "--disable-features=MediaRouter,OptimizationHints,Translate",
    ):
        options.add_argument(arg)
    # Both paths given: Selenium Manager (which would look for drivers online) never runs.
    service = webdriver.ChromeService(executable_path=chromedriver)
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except WebDriverException as error:
        pytest.fail(
            f"could not start headless Chromium ({chromium}) through {chromedriver}: {error.msg}\n"
            f"Set {NO_BROWSER}=1 to skip this test on a machine that cannot run a browser.",
            pytrace=False,
        )
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver, name: str) -> Path:
    """The whole page, not only what the window shows, as ARTIFACTS/<name>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    page_height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(page_height + 100, height), 8000))
    try:
        assert driver.save_screenshot(str(path)), f"no screenshot saved to {path}"
    finally:
        driver.set_window_size(width, height)
    return path


def assert_styled(driver) -> None:
    """The admin's stylesheet, linked by its hashed name, is what the page looks like."""
    hrefs = [link.get_attribute("href") for link in driver.find_elements("css selector", "link[rel=stylesheet]")]
    assert any(HASHED_BASE_CSS.search(href) for href in hrefs), hrefs
    loaded = driver.execute_script(
        "return [...document.styleSheets].filter(s => s.href && s.href.includes('/static/admin/css/base.'))"
        ".map(s => s.cssRules.length)"
    )
    assert loaded and loaded[0] > 0, f"base.css did not load: {loaded}"
    header_bg = driver.execute_script("return getComputedStyle(document.getElementById('header')).backgroundColor")
    assert header_bg == ADMIN_HEADER_BG, f"the admin header is {header_bg}, not the admin's {ADMIN_HEADER_BG}"


def test_a_superuser_logs_in_filters_the_tasks_and_reads_one_in_a_styled_admin(
    browser, server, rpc, echo_agent, conformance_agent, alice_key
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    root = get_user_model().objects.create_superuser("browser-root", "root@example.com")
    # The server runs the production settings, which do not know the tests' fast hasher.
    root.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    root.save(update_fields=["password"])
    asking = rpc(
        "/agents/acme/conformance/",
        "SendMessage",
        {"message": user_message("Which colour for the kitchen?", messageId=f"tck-input-required-{uuid.uuid4()}")},
        key=alice_key,
    ).result["task"]
    assert asking["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    done = [rpc.send("/agents/acme/echo/", f"paint wall {n}", key=alice_key).result["task"] for n in (1, 2)]
    assert all(task["status"]["state"] == "TASK_STATE_COMPLETED" for task in done)
    wait = WebDriverWait(browser, WAIT)

    # Logging in: /admin/ sends an anonymous visitor to the login form, itself styled.
    browser.get(f"{server}/admin/")
    wait.until(ec.presence_of_element_located((By.ID, "id_username")))
    assert_styled(browser)
    browser.find_element(By.ID, "id_username").send_keys("browser-root")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "#login-form [type=submit]").click()
    wait.until(ec.presence_of_element_located((By.ID, "user-tools")))
    assert_styled(browser)

    # The task list, every task in it; then only those waiting for input.
    browser.get(f"{server}/admin/tasks_app/task/")
    wait.until(ec.presence_of_element_located((By.ID, "result_list")))
    listed = browser.find_element(By.ID, "result_list").text
    assert all(task["id"] in listed for task in [asking, *done]), listed
    assert_styled(browser)
    browser.find_element(By.CSS_SELECTOR, "#changelist-filter a[href*='state__exact=input-required']").click()
    wait.until(ec.url_contains("state__exact=input-required"))
    filtered = browser.find_element(By.ID, "result_list").text
    assert asking["id"] in filtered and not any(task["id"] in filtered for task in done), filtered
    screenshot(browser, "admin-task-list-filtered")

    # The task's page: its id, what the user asked and what the agent answered.
    browser.find_element(By.CSS_SELECTOR, f"#result_list a[href*='/{asking['id']}/change/']").click()
    wait.until(ec.url_contains(f"/admin/tasks_app/task/{asking['id']}/change/"))
    wait.until(ec.presence_of_element_located((By.ID, "content")))
    page = browser.find_element(By.TAG_NAME, "body").text
    assert asking["id"] in page
    assert "Which colour for the kitchen?" in page and "Please provide more input" in page, page
    assert_styled(browser)
    shot = screenshot(browser, "admin-task-detail")
    assert shot.stat().st_size > 10_000  # a page, not a blank


def log_in(browser, server: str, username: str) -> None:
    """A superuser `username`, signed in through the admin's login form."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    user = get_user_model().objects.create_superuser(username, f"{username}@example.com")
    # The server runs the production settings, which do not know the tests' fast hasher.
    user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    user.save(update_fields=["password"])
    browser.delete_all_cookies()
    browser.get(f"{server}/admin/login/")
    WebDriverWait(browser, WAIT).until(ec.presence_of_element_located((By.ID, "id_username")))
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "#login-form [type=submit]").click()
    WebDriverWait(browser, WAIT).until(ec.presence_of_element_located((By.ID, "user-tools")))


# What the list must show without scrolling sideways, beside its filters.
LIST_COLUMNS = ("task_id", "agent_name", "state_badge", "last_change", "messages", "artifacts")


def test_the_task_list_reads_at_1280_and_1440_px_and_cancels_tasks_in_bulk_with_a_reason(
    browser, server, rpc, conformance_agent, alice_key
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from tasks_app.models import Task

    asking = [
        rpc(
            "/agents/acme/conformance/",
            "SendMessage",
            {"message": user_message(f"question {n}", messageId=f"tck-input-required-{uuid.uuid4()}")},
            key=alice_key,
        ).result["task"]["id"]
        for n in range(3)
    ]
    log_in(browser, server, "bulk-root")
    wait = WebDriverWait(browser, WAIT)
    try:
        for width in (1280, 1440):
            browser.set_window_size(width, 1000)
            browser.get(f"{server}/admin/tasks_app/task/")
            wait.until(ec.presence_of_element_located((By.ID, "result_list")))
            layout = browser.execute_script(
                """
                const right = c => document.querySelector('#result_list th.column-' + c).getBoundingClientRect().right;
                const ids = [...document.querySelectorAll('#result_list .task-id')];
                const table = document.querySelector('#changelist .results');
                return {
                  page: document.documentElement.scrollWidth, window: window.innerWidth,
                  table: table.scrollWidth, shown: table.clientWidth,
                  rights: arguments[0].map(right),
                  ids: ids.map(e => ({text: e.textContent, title: e.title, lines: e.getBoundingClientRect().height
                                      / parseFloat(getComputedStyle(e).lineHeight || 16),
                                      clipped: e.scrollWidth > e.clientWidth})),
                };
                """,
                list(LIST_COLUMNS),
            )
            assert layout["page"] <= layout["window"], f"{width} px: the page scrolls sideways: {layout}"
            assert layout["table"] <= layout["shown"], f"{width} px: the list scrolls sideways: {layout}"
            assert max(layout["rights"]) <= layout["window"], f"{width} px: a column is off screen: {layout}"
            shown = [i for i in layout["ids"] if i["text"] in asking]
            assert len(shown) == 3, layout["ids"]
            for one in shown:  # one line, its first characters; the whole id on hover and in a copy
                assert one["title"] == one["text"] and one["clipped"] and one["lines"] < 1.6, one
            screenshot(browser, f"admin-task-list-{width}")
    finally:
        browser.set_window_size(1280, 1000)

    # Two tasks ticked, the action chosen, the reason given on the page that asks for it.
    for task_id in asking[:2]:
        browser.find_element(By.CSS_SELECTOR, f"input[name=_selected_action][value='{task_id}']").click()
    Select(browser.find_element(By.CSS_SELECTOR, "select[name=action]")).select_by_value("cancel_selected")
    browser.find_element(By.CSS_SELECTOR, "#changelist-form button[name=index]").click()
    wait.until(ec.presence_of_element_located((By.ID, "cancel-reason")))
    assert "Cancel 2 tasks?" in browser.find_element(By.ID, "content").text
    assert_styled(browser)
    browser.find_element(By.ID, "cancel-reason").send_keys("kitchen closed")
    screenshot(browser, "admin-task-bulk-cancel")
    browser.find_element(By.CSS_SELECTOR, "#content form [type=submit]").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "ul.messagelist")))
    assert "Canceled 2 tasks" in browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text
    states = dict(Task.objects.filter(pk__in=asking).values_list("id", "state"))
    assert [states[uuid.UUID(t)] for t in asking] == ["canceled", "canceled", "input-required"]


def test_the_api_docs_page_renders_both_apis_with_no_request_off_the_machine(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{server}/api/docs/")
    # Swagger UI builds the page from the OpenAPI document it fetched: its operations are there.
    WebDriverWait(browser, WAIT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) > 20)
    paths = browser.execute_script(
        "return [...document.querySelectorAll('.opblock-summary-path')].map(e => e.getAttribute('data-path'))"
    )
    assert any(p.startswith("/api/v1/tenants/{slug}/") for p in paths), paths[:10]
    assert any(p.startswith("/api/registry/") for p in paths), paths[:10]
    # Everything the page loaded, scripts, styles, images and the document itself, came from here.
    loaded = browser.execute_script(
        "return [location.href, ...performance.getEntriesByType('resource').map(e => e.name)]"
    )
    assert len(loaded) > 3 and all(url.startswith(f"{server}/") for url in loaded), loaded
    screenshot(browser, "api-docs")
