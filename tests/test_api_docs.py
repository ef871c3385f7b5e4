"""The API's docs page (/api/docs/): Swagger UI rendering the one OpenAPI document, every file it
loads served by this server (drf-spectacular-sidecar), so the page loads with no request off the
machine; as the tests serve static files and as production does (collected, hashed names)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from tests.test_static import collect_static, production_static

TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


class _Refs(HTMLParser):
    """Every URL the page makes the browser load: scripts, stylesheets, icons, images, frames."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and ((name == "src") or (name == "href" and tag == "link")):
                self.urls.append(value)


def page_refs(html: str) -> list[str]:
    parser = _Refs()
    parser.feed(html)
    return parser.urls


def same_origin(url: str) -> bool:
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc and url.startswith("/")


def check_the_page(client) -> list[str]:
    response = client.get("/api/docs/")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    # Nothing on the page names another origin: no CDN, no fonts, no validator.
    assert "http://" not in html and "https://" not in html
    refs = page_refs(html)
    assert refs, html
    assert all(same_origin(url) for url in refs), refs
    served = []
    for url in refs:
        asset = client.get(url)
        body = b"".join(asset.streaming_content) if asset.streaming else asset.content
        assert asset.status_code == 200 and body, url
        path = urlsplit(url).path
        suffix = Path(path).suffix
        if suffix in TYPES:
            # Served as what it is: browsers refuse a script or stylesheet of another type (nosniff).
            assert TYPES[suffix] in asset["Content-Type"], (url, asset["Content-Type"])
        elif "script" in urlsplit(url).query:
            # The page's own script, in a file of its own (no inline script for a CSP to allow).
            assert "javascript" in asset["Content-Type"]
            script = body.decode()
            assert '"validatorUrl": null' in script  # Swagger UI would ask validator.swagger.io
            assert "https://" not in script and "http://" not in script
            schema_url = script.split('url: "', 1)[1].split('"', 1)[0]
            assert same_origin(schema_url), schema_url
            schema = client.get(schema_url)
            assert schema.status_code == 200
            document = orjson.loads(schema.content) if schema_url.endswith("json") else None
            if document is None:
                assert b"/api/v1/tenants/{slug}/" in schema.content and b"/api/registry/agents/" in schema.content
        served.append(url)
    return served


@pytest.mark.django_db
def test_the_docs_page_loads_only_files_this_server_serves(client):
    served = check_the_page(client)
    assert any("swagger-ui-bundle" in url for url in served)
    assert any("swagger-ui.css" in url for url in served)
    assert any("script" in url for url in served)


@pytest.mark.django_db
def test_the_docs_page_loads_only_files_this_server_serves_as_production_collects_them(
    client, settings, tmp_path: Path
):
    for name, value in production_static(collect_static(tmp_path / "static")).items():
        setattr(settings, name, value)
    served = check_the_page(client)
    hashed = [url for url in served if "swagger-ui-bundle" in url]
    assert hashed and all(".js" in url and url.count(".") >= 2 for url in hashed)


@pytest.mark.django_db
def test_the_document_the_page_renders_holds_both_apis(client):
    document = orjson.loads(client.get("/api/schema/?format=json").content)
    paths = set(document["paths"])
    assert "/api/v1/tenants/{slug}/tasks/{task_id}/cancel/" in paths
    assert "/api/registry/agents/" in paths
    assert {"managementKey", "managementBearer"} <= set(document["components"]["securitySchemes"])


@pytest.mark.django_db
def test_the_document_describes_keys_makers_their_lifetime_and_revoking_by_maker(client):
    document = orjson.loads(client.get("/api/schema/?format=json").content)
    revoke = document["paths"]["/api/v1/tenants/{slug}/keys/revoke/"]["post"]
    assert revoke["operationId"] == "tenant_keys_revoke_made_by"
    listed = document["paths"]["/api/v1/tenants/{slug}/keys/"]["get"]
    assert "made_by" in {p["name"] for p in listed["parameters"]}
    schemas = document["components"]["schemas"]
    assert "made_by" in schemas["KeyOut"]["required"]
    assert "API_KEY_MAX_LIFETIME" in schemas["KeyInRequest"]["properties"]["expires_at"]["description"]
