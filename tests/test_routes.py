"""The one route table: Django's URLconf and the ASGI router read the same routes, so a path
means the same under daphne as under Django's test client."""

import pytest
from django.urls import Resolver404, resolve

from protocols import routes, views


@pytest.mark.parametrize("path", ["/agents/acme/echo/", "/agents/acme/echo", "/agents/ac%me/e.cho/"])
def test_an_endpoint_path_goes_to_the_consumer_and_to_the_same_view_with_the_same_arguments(path):
    consumer, kwargs = routes.consumer_for(path)
    match = resolve(path)
    assert match.func is views.agent_rpc and match.kwargs == kwargs
    assert kwargs["tenant"] in ("acme", "ac%me")


def test_the_card_is_served_by_django_without_a_consumer():
    path = "/agents/acme/echo/.well-known/agent-card.json"
    assert routes.consumer_for(path) is None
    assert resolve(path).url_name == "agent-card"


@pytest.mark.parametrize(
    "path, below",
    [
        ("/agents/acme/echo/tasks/1:cancel", "tasks/1:cancel"),
        ("/agents/acme/echo/extra", "extra"),
        ("/agents/acme/echo//message:send", "/message:send"),
        ("/agents/ac%me/echo/.well-known/agent-card.json", ".well-known/agent-card.json"),  # no slug: no card
        ("/agents/acme/echo/tasks/a\nb", "tasks/a\nb"),  # a newline the client percent-encoded
    ],
)
def test_a_path_below_an_agent_s_goes_to_the_http_json_consumer_and_view_with_the_same_arguments(path, below):
    consumer, kwargs = routes.consumer_for(path)
    match = resolve(path)
    assert match.func is views.agent_rest and match.kwargs == kwargs
    assert kwargs["path"] == below


@pytest.mark.parametrize("path", ["/agents/acme/", "/agents/"])
def test_a_path_of_no_route_has_no_consumer_and_no_view(path):
    assert routes.consumer_for(path) is None
    with pytest.raises(Resolver404):
        resolve(path)
