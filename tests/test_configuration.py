"""docs/configuration.md's one table of settings cannot drift from agentserver/settings.py
(scripts/settings_table.py): every variable settings.py reads has its row with its default as
settings.py computes it, and no row is left for one nothing reads."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("settings_table", ROOT / "scripts" / "settings_table.py")
assert spec is not None and spec.loader is not None
settings_table = importlib.util.module_from_spec(spec)
sys.modules["settings_table"] = settings_table  # its dataclass looks its module up there
spec.loader.exec_module(settings_table)

SETTINGS = (ROOT / "agentserver" / "settings.py").read_text()
DOC = (ROOT / "docs" / "configuration.md").read_text()


def test_every_setting_settings_py_reads_has_its_row_with_its_default_and_nothing_else_has_one():
    assert settings_table.problems(DOC, settings_table.read_settings()) == []
    _, rows, _ = settings_table.read_table(DOC)
    read = settings_table.read_settings()
    assert len(read) > 100 and set(read) <= {row.name for row in rows}
    assert next(r for r in rows if r.name == "AGENT_SOFT_TIME_LIMIT").default == "`120`"


def test_the_check_runs_as_the_script_says():
    checked = subprocess.run(
        [sys.executable, "scripts/settings_table.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_a_setting_read_without_a_row_fails_the_check():
    added = SETTINGS + '\nNEW_KNOB = env.int("NEW_KNOB", default=7)\n'
    said = settings_table.problems(DOC, settings_table.read_settings(added))
    assert said == ["missing: | `NEW_KNOB` | `7` | (not described yet: say what it does) |"]


def test_a_row_for_a_setting_no_longer_read_fails_the_check():
    gone = SETTINGS.replace('env.int("STREAM_RETRY_AFTER", default=30)', "30")
    said = settings_table.problems(DOC, settings_table.read_settings(gone))
    assert said == ["STREAM_RETRY_AFTER is read nowhere any more: drop its row"]


def test_a_default_changed_in_settings_py_alone_fails_the_check():
    changed = SETTINGS.replace('env.int("PUSH_MAX_ATTEMPTS", default=12)', 'env.int("PUSH_MAX_ATTEMPTS", default=20)')
    said = settings_table.problems(DOC, settings_table.read_settings(changed))
    assert said == ["PUSH_MAX_ATTEMPTS: the default is `20` in settings.py, `12` here"]


@pytest.mark.parametrize("name", ["PORT", "RUN_DIR", "CELERY_DB_REUSE_MAX"])
def test_a_row_for_a_variable_read_elsewhere_stays_while_it_is_read(name):
    _, rows, _ = settings_table.read_table(DOC)
    assert name in {row.name for row in settings_table.table(rows, settings_table.read_settings())}
