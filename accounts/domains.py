"""A choice column the database itself holds to its choices, at no cost to the writes that leave
it alone.

A CHECK constraint is evaluated on every INSERT and every UPDATE of its row, whatever columns
the statement sets, and Postgres reads its expression back from the catalog text and plans it
again in every statement that writes the table. On the task store, whose rows are written three
to eight times per task, the membership checks of its choice columns (states, dialects, failure
kinds, roles, event kinds) cost Postgres ~0.25 ms of CPU per task, a sixth of what it spends on
one (measured in process, 1,000 sends and runs a round, bench/README.md). A domain's check is
kept parsed in the backend's type cache and runs only where a value is assigned to the column:
the claim of a run, which writes one timestamp, checks nothing, and a state change checks the
state alone.

`ChoiceDomainField` is a CharField whose column, on Postgres, has the domain `domain` as its type:
a `varchar(max_length)` whose check admits exactly the field's choices. A migration makes the
domain (`CreateChoiceDomain`, then `SetChoiceDomainWords`) with its words written out, as
migrations must be fixed; a change of the choices therefore needs a migration that sets the
domain's words too, and `tests/test_models.py` fails until it exists. Postgres reports the column as its base type, so
reads and parameters are a CharField's. Elsewhere (SQLite, the embedded mode) the same rule is a
column CHECK.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.db import models
from django.db.migrations.operations.base import Operation

# The words a domain admits are written into SQL as they are: plain identifiers and versions.
_WORD = re.compile(r"[a-z0-9./-]*")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _words(values: Iterable[str]) -> list[str]:
    words = [str(v) for v in values]
    for word in words:
        if not _WORD.fullmatch(word):
            raise ValueError(f"a choice domain's word must match {_WORD.pattern}, not {word!r}")
    return words


def _checked_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"a domain's name must match {_NAME.pattern}, not {name!r}")
    return name


def array_literal(values: Iterable[str]) -> str:
    """The words as a Postgres text[] literal: `{"a","b"}` (quoted, so that "" is a word too)."""
    return "{" + ",".join(f'"{w}"' for w in _words(values)) + "}"


class ChoiceDomainField(models.CharField):
    def __init__(self, *args: Any, domain: str, **kwargs: Any) -> None:
        self.domain = _checked_name(domain)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["domain"] = self.domain
        return name, path, args, kwargs

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "postgresql":
            return self.domain
        return super().db_type(connection)

    def db_check(self, connection: Any) -> str | None:
        if connection.vendor == "postgresql":
            return None  # the domain's own check
        words = ", ".join(f"'{w}'" for w in _words(value for value, _ in self.flatchoices))
        return f"{connection.ops.quote_name(self.column)} IN ({words})"


class _DomainOperation(Operation):
    """A schema operation on a Postgres domain alone: no model state changes, and nothing happens
    on other databases (the field's column CHECK stands in for the domain there)."""

    reduces_to_sql = True
    reversible = True

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for statement in self.forwards():
                schema_editor.execute(statement)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for statement in self.backwards():
                schema_editor.execute(statement)

    def forwards(self) -> list[str]:
        raise NotImplementedError

    def backwards(self) -> list[str]:
        raise NotImplementedError


class CreateChoiceDomain(_DomainOperation):
    """Make the domain of a ChoiceDomainField, a `varchar(length)`, without its words yet: a
    varchar column turned into it keeps its table (no rewrite), and `SetChoiceDomainWords`,
    after the AlterField, adds the check (Postgres then reads the column once to validate it)."""

    def __init__(self, name: str, length: int) -> None:
        self.name, self.length = _checked_name(name), int(length)

    def deconstruct(self) -> Any:
        return (self.__class__.__name__, [self.name, self.length], {})

    def forwards(self) -> list[str]:
        return [f"CREATE DOMAIN {self.name} AS varchar({self.length})"]

    def backwards(self) -> list[str]:
        return [f"DROP DOMAIN {self.name}"]

    def describe(self) -> str:
        return f"Create the choice domain {self.name}"


class SetChoiceDomainWords(_DomainOperation):
    """The words a domain admits, from now on: exactly `values` (`previous`, the words before,
    are restored when the migration is reversed)."""

    def __init__(self, name: str, values: list[str], previous: list[str] | None = None) -> None:
        self.name = _checked_name(name)
        self.values, self.previous = _words(values), None if previous is None else _words(previous)

    def deconstruct(self) -> Any:
        kwargs = {} if self.previous is None else {"previous": self.previous}
        return (self.__class__.__name__, [self.name, self.values], kwargs)

    def _set(self, values: list[str] | None) -> list[str]:
        statements = [f"ALTER DOMAIN {self.name} DROP CONSTRAINT IF EXISTS {self.name}_valid"]
        if values is not None:
            statements.append(
                f"ALTER DOMAIN {self.name} ADD CONSTRAINT {self.name}_valid "
                f"CHECK (VALUE::text = ANY ('{array_literal(values)}'::text[]))"
            )
        return statements

    def forwards(self) -> list[str]:
        return self._set(self.values)

    def backwards(self) -> list[str]:
        return self._set(self.previous)

    def describe(self) -> str:
        return f"Set the words of the choice domain {self.name}"
