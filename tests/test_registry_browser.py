"""The directory in a real browser: headless Chromium driven by Selenium through Debian's
chromium-driver, against daphne serving the test database with the static files collected as in
production (the server fixture and the browser of tests/test_admin_browser.py). With the page's
scripts switched off (there are none to run: the directory works without JavaScript) it types a
query, ticks a filter, submits, sees the narrowed results, opens one and finds its skills and
trust signals, and checks the stylesheet is applied, not only linked.

AGENTSERVER_NO_BROWSER=1 skips it on a machine known to have no browser. A screenshot of each
page goes to ARTIFACTS_DIR (default test-artifacts/, git-ignored)."""

from __future__ import annotations

import re

import pytest
from django.db.models import Q

from registry.models import Entry, Health
from tests.test_admin_browser import WAIT, browser, screenshot, server  # noqa: F401 (fixtures)
from tests.test_registry_pages import card, make_entry, seed, truncate_registry

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# registry.css's --header (#10324f) as WebDriver reports a computed colour; without the
# stylesheet the header would be transparent.
HEADER_BG = "rgba(16, 50, 79, 1)"
HASHED_CSS = re.compile(r"/static/registry/registry\.[0-9a-f]{12}\.css$")


def route_planners() -> dict[str, Entry]:
    """Three entries about routes: the one to find (cycling, signed), one with the words but not
    the tag, one with the tag but not the words."""
    planner = make_entry(
        card(
            "Route Planner",
            description="Plans cycling routes between two places.",
            provider="Example Mobility",
            bindings=("JSONRPC", "HTTP+JSON"),
            streaming=True,
            skills=[
                {
                    "id": "plan-route",
                    "name": "Plan a route",
                    "description": "A route between two places, avoiding busy roads.",
                    "tags": ["cycling", "routes"],
                    "examples": ["From the station to the lake, please"],
                }
            ],
        ),
        kid="mobility-2026",
    )
    trucks = make_entry(
        card(
            "Truck Route Optimiser",
            description="Optimises delivery routes for lorries.",
            skills=[
                {"id": "optimise", "name": "Optimise routes", "description": "Fewer miles.", "tags": ["logistics"]}
            ],
        ),
        health=Health.STALE,
    )
    shop = make_entry(
        card(
            "Bike Shop",
            description="Sells and mends bicycles.",
            skills=[{"id": "mend", "name": "Book a repair", "description": "A slot at the shop.", "tags": ["cycling"]}],
        )
    )
    return {"planner": planner, "trucks": trucks, "shop": shop}


def assert_styled(driver) -> None:
    hrefs = [link.get_attribute("href") for link in driver.find_elements("css selector", "link[rel=stylesheet]")]
    assert any(HASHED_CSS.search(href) for href in hrefs), hrefs
    header = driver.find_element("css selector", "header.site-header")
    assert header.value_of_css_property("background-color") == HEADER_BG, "registry.css is not applied"


def test_a_visitor_searches_filters_and_opens_an_agent_without_javascript(browser, server):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    truncate_registry()
    seed(60)
    agents = route_planners()
    wait = WebDriverWait(browser, WAIT)
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        browser.get(f"{server}/registry/")
        wait.until(ec.presence_of_element_located((By.ID, "q")))
        assert browser.find_element(By.TAG_NAME, "h1").text == "Agent directory"
        assert_styled(browser)
        everyone = browser.find_elements(By.CSS_SELECTOR, ".result h3 a")
        assert len(everyone) == 20
        screenshot(browser, "registry-directory")

        # Type words, tick a tag, submit: only the cycling route planner is left.
        browser.find_element(By.ID, "q").send_keys("route")
        cycling = browser.find_element(By.CSS_SELECTOR, "input[name=tag][value=cycling]")
        browser.find_element(By.CSS_SELECTOR, f"label[for='{cycling.get_attribute('id')}']").click()
        assert cycling.is_selected()
        browser.find_element(By.CSS_SELECTOR, ".search-field button[type=submit]").click()
        wait.until(ec.url_contains("tag=cycling"))
        assert "q=route" in browser.current_url
        names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, ".result h3 a")]
        assert names == ["Route Planner"], names
        assert browser.find_element(By.CSS_SELECTOR, "input[name=tag][value=cycling]").is_selected()
        assert browser.find_element(By.ID, "q").get_attribute("value") == "route"
        badges = browser.find_element(By.CSS_SELECTOR, ".result .badges").text
        assert "Domain proven" in badges and "Signed" in badges and "Health: Healthy" in badges
        expected = Entry.objects.filter(Q(name__icontains="route")).count()
        assert expected == 2  # the words alone would find the truck optimiser too
        screenshot(browser, "registry-directory-filtered")

        # The agent's page: its skills with an example, its endpoints and trust signals.
        browser.find_element(By.LINK_TEXT, "Route Planner").click()
        wait.until(ec.url_contains(f"/registry/{agents['planner'].pk}/"))
        wait.until(ec.presence_of_element_located((By.ID, "skills")))
        assert browser.find_element(By.TAG_NAME, "h1").text == "Route Planner"
        skills = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=skills]").text
        assert "Plan a route" in skills and "From the station to the lake, please" in skills
        trust = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=trust]").text
        assert "Approved" in trust and "Proven" in trust and "a token at a well-known path" in trust
        assert "Signed" in trust and "mobility-2026" in trust
        interface = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=interface]").text
        assert "https://agents.example.test/route-planner/jsonrpc" in interface and "HTTP+JSON" in interface
        # The card's JSON is folded away until asked for (a <details>, no script).
        card_json = browser.find_element(By.CSS_SELECTOR, "pre.json")
        assert not card_json.is_displayed()
        browser.find_element(By.CSS_SELECTOR, "details summary").click()
        assert card_json.is_displayed() and '"supportedInterfaces"' in card_json.text
        assert_styled(browser)
        shot = screenshot(browser, "registry-entry")
        assert shot.stat().st_size > 10_000  # a page, not a blank

        # The skip link is the first thing the keyboard reaches, and shows itself.
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        browser.get(browser.current_url)
        wait.until(ec.presence_of_element_located((By.ID, "skills")))
        ActionChains(browser).send_keys(Keys.TAB).perform()
        focused = browser.switch_to.active_element
        assert focused.text == "Skip to main content" and focused.get_attribute("href").endswith("#main")
        assert focused.value_of_css_property("outline-style") == "solid"
    finally:
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
        truncate_registry()
