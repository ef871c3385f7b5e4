"""Process tuning changes what a request costs, never what it does."""

import gc
import time

import pytest

from agentserver import runtime
from tests.conftest import backend_pid, end_sessions


@pytest.fixture
def web_request(monkeypatch):
    """daphne's request class, with an __init__ that records what it is given (put back after)."""
    from daphne import http_protocol

    given: dict = {}

    def record(self, *args, **kwargs):
        given.update(kwargs)

    monkeypatch.setattr(http_protocol.WebRequest, "__init__", record)
    return http_protocol.WebRequest, given


@pytest.fixture
def gc_restored():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_daphne_requests_leave_form_bodies_to_the_application(web_request):
    cls, given = web_request
    runtime.leave_request_bodies_to_the_application()
    cls.__init__(object.__new__(cls), "a channel")
    assert given == {"parsePOSTFormSubmission": False}


def test_leaving_bodies_to_the_application_twice_wraps_once(web_request):
    cls, _ = web_request
    runtime.leave_request_bodies_to_the_application()
    once = cls.__init__
    runtime.leave_request_bodies_to_the_application()
    assert cls.__init__ is once


def test_tuning_the_collector_freezes_what_is_loaded_and_raises_the_young_threshold(settings, gc_restored):
    settings.GC_GEN0_THRESHOLD = 12345
    runtime.tune_gc()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == 12345


def test_a_zero_threshold_keeps_pythons_own(settings, gc_restored):
    settings.GC_GEN0_THRESHOLD = 0
    before = gc.get_threshold()
    runtime.tune_gc()
    assert gc.get_threshold() == before


def test_each_prefork_child_tunes_its_collector_once_forked(settings, gc_restored):
    from celery import signals

    import agentserver.celery  # noqa: F401 - connects the receivers

    settings.GC_GEN0_THRESHOLD = 23456
    signals.worker_process_init.send(sender=None)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == 23456


def test_a_worker_runs_four_children_unless_told_otherwise():
    from agentserver.celery import app

    assert app.conf.worker_concurrency == 4


# --- database connections of a worker ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_healthy_connection_is_kept():
    from django.db import connection

    pid = backend_pid()
    assert runtime.drop_dead_connections() == 0
    assert connection.connection is not None and backend_pid() == pid


@pytest.mark.django_db(transaction=True)
def test_a_connection_whose_session_postgres_ended_is_dropped_before_it_fails_a_query():
    pid = backend_pid()
    assert end_sessions("pid = %s", pid) == 1
    time.sleep(0.2)  # the server's goodbye reaches the socket
    assert runtime.drop_dead_connections() == 1
    assert backend_pid() != pid  # a fresh session, no error on the way


@pytest.mark.django_db(transaction=True)
def test_a_connection_that_failed_a_query_and_fails_the_probe_is_dropped():
    from django.db import OperationalError, connection

    end_sessions("pid = %s", backend_pid())
    time.sleep(0.2)
    with pytest.raises(OperationalError):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    assert connection.errors_occurred
    assert runtime.drop_dead_connections() == 1
    assert backend_pid()
