"""What the store can hold: the one check every client value and agent value passes."""

import datetime
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts import storable
from accounts.storable import MAX_DEPTH, Malformed, Refused, check, check_text, loads


def nested(depth: int, leaf=1):
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def refusal(value, **kwargs) -> Refused:
    with pytest.raises(Refused) as caught:
        check(value, **kwargs)
    return caught.value


# --- parsing ---------------------------------------------------------------------------


def test_a_body_that_is_not_utf8_is_malformed_and_says_where():
    with pytest.raises(Malformed, match=r"the body is not UTF-8 \(byte 7 is 0xff\)"):
        loads(b'{"a": "\xff"}')


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(literal):
    with pytest.raises(Malformed, match=f"{literal.decode()} is not a JSON value"):
        loads(b'{"a": ' + literal + b"}")


@pytest.mark.parametrize("body", [b"", b"   ", b'{"a": 1', b'{"a": 1} x', b"\xef\xbb\xbf{}"])
def test_what_is_not_json_is_malformed(body):
    with pytest.raises(Malformed):
        loads(body)


def test_nesting_past_the_parsers_own_limit_is_read_to_the_limit_and_refused_there():
    value = loads(b"[" * 100_000 + b"]" * 100_000)
    error = refusal(value)
    assert str(error).endswith(f"nests deeper than {MAX_DEPTH} levels of arrays and objects")
    assert error.path == (0,) * MAX_DEPTH


def test_a_body_past_the_parsers_limit_keeps_its_shallow_members_whatever_the_strings_hold():
    deep = b'["[{\\"]", {"k]": ' * 3_000 + b"0" + b"}]" * 3_000
    value = loads(b'{"a": "]]}", "deep": ' + deep + b', "id": 7, "b": ["{"]}')
    assert (value["a"], value["id"], value["b"]) == ("]]}", 7, ["{"])
    assert refusal(value).path[0] == "deep"


def test_a_body_past_the_parsers_limit_that_is_not_json_near_the_top_is_malformed():
    with pytest.raises(Malformed):
        loads(b'{"id": 1, "a": ' + b"[" * 5_000 + b"]" * 5_000 + b"} x")
    with pytest.raises(Malformed):
        loads(b'{"id": 1, "a": ' + b"[" * 5_000 + b"]" * 4_000)


@settings(max_examples=200, deadline=None)
@given(
    shallow=st.recursive(
        st.none() | st.integers() | st.text('[]{}\\"ab'),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text('[]{}\\"ab', max_size=3), inner, max_size=3)
        ),
        max_leaves=10,
    ),
    depth=st.integers(10_000, 30_000),
)  # past the parser even with the recursion limit hypothesis raises
def test_reading_past_the_parsers_limit_agrees_with_reading_a_body_it_can_take(shallow, depth):
    # A body the parser gives up on reads as the body cut at the limit would: everything
    # above the limit kept, the first level past it `[]`, which `check` refuses there.
    def body(levels):
        text = json.dumps({"before": shallow, "deep": "@", "after": shallow})
        return text.replace('"@"', "[" * levels + "]" * levels).encode()

    whole, cut = loads(body(MAX_DEPTH)), loads(body(depth))
    assert whole == cut
    assert refusal(whole).path == refusal(cut).path


def test_a_member_given_twice_is_refused_at_its_path():
    error = refusal(loads(b'{"params": {"message": {"role": 1, "role": 2}}}'))
    assert str(error) == "params.message.role is given more than once"
    assert error.path == ("params", "message", "role")


def test_an_integer_literal_too_long_for_64_bits_is_refused_whatever_its_length():
    for digits in (21, 5000):
        error = refusal(loads(b'{"n": [' + b"9" * digits + b"]}"))
        assert str(error) == "n[0] is a number out of range"


# --- the rules -------------------------------------------------------------------------


def test_nesting_up_to_the_limit_is_held_and_one_level_more_is_refused():
    check(nested(MAX_DEPTH))
    error = refusal(nested(MAX_DEPTH + 1), where="data")
    assert str(error).startswith("data.k[0].k[0].k[0].k[0]… (")
    assert str(error).endswith(f"nests deeper than {MAX_DEPTH} levels of arrays and objects")


def test_the_depth_a_value_starts_at_counts():
    check(nested(MAX_DEPTH - 4), depth=5)
    with pytest.raises(Refused):
        check(nested(MAX_DEPTH - 3), depth=5)


@pytest.mark.parametrize(
    "text, shown",
    [
        ("a\x00b", "U+0000"),
        ("\ud800", "a lone surrogate (U+D800)"),
        ("x\udfff", "a lone surrogate (U+DFFF)"),
    ],
)
def test_strings_postgres_cannot_hold_are_refused(text, shown):
    assert str(refusal({"a": [text]})) == f"a[0] contains {shown}, which this server does not accept"
    assert str(refusal({text: 1}, where="metadata")) == (
        f"metadata has a member name that contains {shown}, which this server does not accept"
    )


def test_every_other_character_is_held_as_sent():
    check("\x01\x1f\u200f\ufeff\uffff\U0010ffff\U0001f600 ok")


@pytest.mark.parametrize("number", [2**64 - 1, -(2**63), 0, -0.0, 1.5e308, 5e-324])
def test_numbers_within_range_are_held(number):
    check({"n": number})


@pytest.mark.parametrize(
    "number, rule",
    [
        (2**64, "is an integer out of range (at most 64 bits)"),
        (-(2**63) - 1, "is an integer out of range (at most 64 bits)"),
        (float("inf"), "is a number out of range"),
        (float("nan"), "is a number out of range"),
    ],
)
def test_numbers_out_of_range_are_refused(number, rule):
    assert str(refusal({"n": number})) == f"n {rule}"


@pytest.mark.parametrize("value, name", [({1, 2}, "set"), (b"x", "bytes"), (datetime.date(2026, 1, 1), "date")])
def test_what_is_not_json_is_refused(value, name):
    assert str(refusal({"v": value})) == f"v is a {name}, which is not a JSON value"


def test_member_names_must_be_strings():
    assert str(refusal({1: "x"}, where="metadata")) == "metadata has a member name that is not a string: 1"


def test_a_column_value_longer_than_its_column_is_refused_with_the_limit():
    assert check_text("x" * 200, where="artifact_id", max_length=200) == "x" * 200
    with pytest.raises(Refused, match=r"^artifact_id is longer than 200 characters \(201\)$"):
        check_text("x" * 201, where="artifact_id", max_length=200)
    with pytest.raises(Refused, match="contains U\\+0000"):
        check_text("a\x00", where="name", max_length=10)


def test_a_value_quoted_in_a_message_is_cut_short():
    assert storable.brief("abc") == "'abc'"
    assert len(storable.brief("x" * 10_000)) == 60


# --- what passes can be written back -----------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_whatever_passes_the_check_can_be_written_and_read_back(value):
    try:
        check(value)
    except Refused:
        return
    # What readers do with it: encode it (nested under a few levels of their own) and parse it.
    written = orjson.dumps({"result": {"task": {"history": [{"parts": [{"data": value}]}]}}})
    assert orjson.loads(written)["result"]["task"]["history"][0]["parts"][0]["data"] == value


def test_a_raw_control_character_in_a_string_is_not_json():
    with pytest.raises(Malformed, match="Invalid control character"):
        loads(b'{"a": "x\x00y"}')


# Values with everything the rules refuse, at any depth.
hostile_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(st.characters(codec=None))
    | st.sampled_from(["\x00", "\ud800", "a\udfffb", 2**64, float("nan")]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=3), children, max_size=3)
        | st.builds(lambda v: nested(MAX_DEPTH, v), children)
    ),
    max_leaves=20,
)


def passes(value, **kwargs) -> bool:
    try:
        check(value, **kwargs)
    except Refused:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(hostile_values)
def test_the_fast_pass_and_the_explaining_pass_agree(value):
    from accounts.storable import _clean, _explain

    try:
        _explain(value, "", 1)
        explained = True
    except Refused:
        explained = False
    assert _clean(value, 1, True) == explained


@settings(max_examples=400, deadline=None)
@given(hostile_values, st.booleans())
def test_a_body_without_an_unstorable_escape_holds_no_unstorable_string(value, ascii_only):
    try:
        body = json.dumps({"v": value}, ensure_ascii=ascii_only, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # NaN; a lone surrogate written raw is not UTF-8
        return
    parsed = loads(body)
    assert passes(parsed, strings=storable.escapes_unstorable(body)) == passes(parsed)
