"""Media types: matching, the agent's modes (its card's and its skills'), and the check that
refuses a message before anything is stored."""

import pytest

from accounts.models import Agent
from tasks_app import media
from tasks_app import parts as P
from tasks_app.errors import ContentTypeNotSupported


@pytest.mark.parametrize(
    "one, other",
    [
        ("text/plain", "text/plain"),
        ("Text/Plain; charset=utf-8", "text/plain"),
        ("image/png", "image/*"),
        ("image/*", "image/png"),
        ("application/pdf", "*/*"),
        ("*/*", "video/mp4"),
        ("text", "text/plain"),
    ],
)
def test_media_types_match_without_case_or_parameters_and_with_wildcards(one, other):
    assert media.matches(one, other)


@pytest.mark.parametrize(
    "one, other",
    [
        ("text/plain", "text/html"),
        ("image/png", "text/*"),
        ("application/json", "application/jsonl"),
        ("image", "text/plain"),
    ],
)
def test_different_media_types_do_not_match(one, other):
    assert not media.matches(one, other)


def agent(**fields) -> Agent:
    return Agent(**{"input_modes": ["text/plain"], "output_modes": ["text/plain"], "skills": [], **fields})


def test_an_agent_takes_its_card_s_modes_and_every_skill_s():
    reader = agent(
        skills=[{"id": "read", "inputModes": ["application/pdf"], "outputModes": ["text/markdown"]}, {"id": "plain"}]
    )
    assert media.input_modes(reader) == ["text/plain", "application/pdf"]
    assert media.output_modes(reader) == ["text/plain", "text/markdown"]


def test_an_agent_that_declares_no_modes_has_the_card_s_default():
    assert media.input_modes(agent(input_modes=[])) == ["text/plain"]
    assert media.output_modes(agent(output_modes=[])) == ["text/plain"]


def test_a_file_of_a_media_type_the_agent_does_not_take_is_refused_with_what_it_takes():
    message = [P.text("see attached"), P.file_bytes(b"%PDF", media_type="application/pdf")]
    with pytest.raises(ContentTypeNotSupported, match=r"parts\[1\].*'application/pdf'.*accepts text/plain"):
        media.check_message(agent=agent(), parts=message, accepted_output_modes=None)


def test_a_file_the_agent_takes_through_a_skill_or_a_wildcard_passes():
    files = [P.file_uri("https://example.test/a.pdf", media_type="application/pdf")]
    media.check_message(
        agent=agent(skills=[{"inputModes": ["application/pdf"]}]), parts=files, accepted_output_modes=None
    )
    media.check_message(agent=agent(input_modes=["application/*"]), parts=files, accepted_output_modes=None)


def test_parts_that_name_no_media_type_are_not_checked():
    unnamed = [P.text("hi"), P.data({"a": 1}), P.file_bytes(b"?")]
    media.check_message(agent=agent(input_modes=["image/png"]), parts=unnamed, accepted_output_modes=None)


def test_a_client_that_accepts_nothing_the_agent_produces_is_refused():
    with pytest.raises(ContentTypeNotSupported, match=r"acceptedOutputModes \(image/png\).*produces text/plain"):
        media.check_message(agent=agent(), parts=[P.text("hi")], accepted_output_modes=["image/png"])


@pytest.mark.parametrize("accepted", [None, [], ["text/*"], ["image/png", "text/plain"], ["*/*"]])
def test_a_client_that_accepts_something_the_agent_produces_passes(accepted):
    media.check_message(agent=agent(), parts=[P.text("hi")], accepted_output_modes=accepted)
