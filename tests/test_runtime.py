"""Process tuning changes what a request costs, never what it does."""

import gc

import pytest

from agentserver import runtime


@pytest.fixture
def twisted_http(monkeypatch):
    from twisted.web import http

    # Twisted's own parse, even if importing agentserver.asgi already cached it; put back after.
    monkeypatch.setattr(http, "_parseContentType", getattr(http._parseContentType, "__wrapped__", http._parseContentType))
    return http


@pytest.fixture
def gc_restored():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_the_cached_content_type_parse_answers_as_twisted_does(twisted_http):
    original = twisted_http._parseContentType
    runtime.cache_twisted_content_type()
    cached = twisted_http._parseContentType
    assert cached is not original
    for header in (b"application/json", b"Application/JSON; charset=utf-8", b"multipart/form-data; boundary=x",
                   b"application/x-www-form-urlencoded", b"", b"nonsense"):
        assert cached(header) == original(header)
        assert cached(header) == original(header)
    assert cached.cache_info().hits == 6


def test_caching_the_content_type_parse_twice_wraps_it_once(twisted_http):
    runtime.cache_twisted_content_type()
    once = twisted_http._parseContentType
    runtime.cache_twisted_content_type()
    assert twisted_http._parseContentType is once


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
