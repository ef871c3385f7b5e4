"""accounts.domains: a choice column held to its choices by a Postgres domain (a column CHECK
elsewhere), and the migration operations that make and change the domain."""

import pytest

from accounts.domains import ChoiceDomainField, CreateChoiceDomain, SetChoiceDomainWords, array_literal


class _Connection:
    def __init__(self, vendor):
        self.vendor = vendor

    class ops:  # noqa: N801 - stands in for connection.ops
        @staticmethod
        def quote_name(name):
            return f'"{name}"'


def _field():
    field = ChoiceDomainField(max_length=8, choices=[("", "-"), ("a2a/1.0", "one")], domain="tasks_x")
    field.set_attributes_from_name("kind")
    return field


def test_the_words_are_a_quoted_text_array_so_that_the_empty_word_is_one_too():
    assert array_literal(["", "a2a/1.0", "input-required"]) == '{"","a2a/1.0","input-required"}'


@pytest.mark.parametrize("word", ["It's", 'a"b', "a,b", "{x}", "a\\b", "A"])
def test_a_word_that_would_need_quoting_in_sql_is_refused(word):
    with pytest.raises(ValueError, match="word"):
        array_literal([word])


@pytest.mark.parametrize("name", ["tasks-state", "Tasks", "1tasks", "tasks state", "x;drop"])
def test_a_domain_name_that_is_no_plain_identifier_is_refused(name):
    with pytest.raises(ValueError, match="name"):
        ChoiceDomainField(max_length=8, choices=[("a", "a")], domain=name)
    with pytest.raises(ValueError, match="name"):
        CreateChoiceDomain(name, 8)


def test_on_postgres_the_column_is_of_the_domain_and_has_no_check_of_its_own():
    field = _field()
    assert field.db_type(_Connection("postgresql")) == "tasks_x"
    assert field.db_check(_Connection("postgresql")) is None


def test_elsewhere_the_column_is_a_varchar_with_a_check_of_its_choices():
    field = _field()
    assert field.db_check(_Connection("sqlite")) == "\"kind\" IN ('', 'a2a/1.0')"


def test_the_field_and_the_operations_survive_a_migration_s_round_trip():
    name, path, args, kwargs = _field().deconstruct()
    assert path == "accounts.domains.ChoiceDomainField" and kwargs["domain"] == "tasks_x"
    assert SetChoiceDomainWords("tasks_x", ["a"], previous=["a", "b"]).deconstruct() == (
        "SetChoiceDomainWords",
        ["tasks_x", ["a"]],
        {"previous": ["a", "b"]},
    )


def test_setting_the_words_replaces_the_check_and_reversing_restores_the_previous_words():
    op = SetChoiceDomainWords("tasks_x", ["a", "b"], previous=["a"])
    assert op.forwards() == [
        "ALTER DOMAIN tasks_x DROP CONSTRAINT IF EXISTS tasks_x_valid",
        'ALTER DOMAIN tasks_x ADD CONSTRAINT tasks_x_valid CHECK (VALUE::text = ANY (\'{"a","b"}\'::text[]))',
    ]
    assert op.backwards()[1].endswith("('{\"a\"}'::text[]))")
    assert SetChoiceDomainWords("tasks_x", ["a"]).backwards() == [
        "ALTER DOMAIN tasks_x DROP CONSTRAINT IF EXISTS tasks_x_valid"
    ]
