"""The embedded mode's background threads (agentserver/background.py): jobs, countdowns, beat's
intervals, the soft time limit and a graceful stop. Across daphne: tests/test_embedded.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from celery.schedules import crontab, schedule

from agentserver import background
from agentserver.background import Jobs


@pytest.fixture
def jobs():
    pool = Jobs(threads=2)
    yield pool
    pool.stop()


def test_a_job_runs_on_a_pool_thread_not_the_caller_s(jobs):
    ran = threading.Event()
    where: list[str] = []
    jobs.submit(lambda: (where.append(threading.current_thread().name), ran.set()), name="j")
    assert ran.wait(5) and where[0].startswith("background")


def test_a_job_with_a_countdown_runs_when_it_is_due_and_not_before(jobs):
    ran = threading.Event()
    started = time.monotonic()
    jobs.submit(ran.set, delay=0.4, name="later")
    assert not ran.wait(0.2)
    assert ran.wait(5) and time.monotonic() - started >= 0.4


def test_sooner_jobs_are_not_held_up_by_later_ones(jobs):
    order: list[str] = []
    done = threading.Event()
    jobs.submit(lambda: (order.append("late"), done.set()), delay=0.5, name="late")
    jobs.submit(lambda: order.append("soon"), delay=0.1, name="soon")
    assert done.wait(5) and order == ["soon", "late"]


def test_a_repeating_job_runs_every_interval(jobs):
    runs: list[float] = []
    jobs.every(0.1, lambda: runs.append(time.monotonic()), name="tick")
    time.sleep(0.65)
    assert 4 <= len(runs) <= 7


def test_the_soft_time_limit_interrupts_a_runaway_job_with_celery_s_exception(jobs):
    seen: list[str] = []
    ended = threading.Event()

    def runaway() -> None:
        try:
            while True:  # pure Python: the exception lands at its next instruction
                pass
        except SoftTimeLimitExceeded:
            seen.append("stopped")
        finally:
            ended.set()

    jobs.submit(runaway, soft_time_limit=0.2, name="runaway")
    assert ended.wait(5) and seen == ["stopped"]
    assert jobs.running() == []


def test_a_job_that_ends_in_time_is_never_interrupted_later(jobs):
    after = threading.Event()
    errors: list[BaseException] = []

    def quick() -> None:
        pass

    def next_job() -> None:
        try:
            time.sleep(0.4)
        except BaseException as exc:  # noqa: BLE001 - the test looks for exactly this
            errors.append(exc)
        after.set()

    jobs.submit(quick, soft_time_limit=0.2, name="quick")
    time.sleep(0.05)
    jobs.submit(next_job, name="next")  # may run on the thread `quick` used
    assert after.wait(5) and errors == []


def test_stopping_starts_nothing_more_but_lets_a_running_job_finish(jobs):
    begun, finished, late = threading.Event(), threading.Event(), threading.Event()

    def running() -> None:
        begun.set()
        time.sleep(0.3)
        finished.set()

    jobs.submit(running, name="running")
    assert begun.wait(5)
    jobs.submit(late.set, delay=0.1, name="due later")
    jobs.stop()
    jobs.submit(late.set, name="after the stop")
    assert finished.wait(5)
    assert not late.wait(0.3)


def test_beat_entries_run_at_their_intervals_and_a_crontab_is_refused():
    assert background._interval(15.0) == 15.0
    assert background._interval(timedelta(minutes=1)) == 60.0
    assert background._interval(schedule(timedelta(seconds=5))) == 5.0
    assert background._interval(crontab(minute="*/5")) is None


def test_beat_s_schedule_runs_its_tasks_on_the_threads(monkeypatch):
    from celery import Celery

    app = Celery("beat-test", set_as_current=False)
    ran = threading.Event()

    @app.task(name="t.sweep")
    def sweep() -> None:
        ran.set()

    app.conf.beat_schedule = {
        "sweep": {"task": "t.sweep", "schedule": 0.1},
        "cron": {"task": "t.sweep", "schedule": crontab()},
    }
    pool = Jobs(threads=1)
    monkeypatch.setattr(background, "jobs", lambda: pool)
    try:
        assert background.start_beat(app) == 1  # the crontab is left out, with a warning
        assert ran.wait(5)
    finally:
        pool.stop()


def test_every_entry_of_the_server_s_own_beat_schedule_is_an_interval(settings):
    assert all(background._interval(entry["schedule"]) for entry in settings.CELERY_BEAT_SCHEDULE.values())


def test_a_task_published_in_threads_mode_runs_through_the_pool(monkeypatch):
    from celery import Celery

    app = Celery("threads-test", set_as_current=False, task_cls="agentserver.background:ThreadTask")
    got: list[tuple[int, str]] = []
    ran = threading.Event()

    @app.task(name="t.job")
    def job(n: int, word: str) -> None:
        got.append((n, word))
        ran.set()

    pool = Jobs(threads=1)
    monkeypatch.setattr(background, "jobs", lambda: pool)
    try:
        started = time.monotonic()
        job.apply_async((1, "one"), countdown=0.2)
        assert ran.wait(5) and got == [(1, "one")] and time.monotonic() - started >= 0.2
    finally:
        pool.stop()
