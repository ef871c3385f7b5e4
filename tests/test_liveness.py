"""Worker liveness (tasks_app.holders, tasks_app.liveness): a run whose process stopped beating
is taken from it, fenced by a fresh token; a process that beats is never robbed."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.selectors import Principal
from tasks_app import holders, liveness, runner, services
from tasks_app.domain import NewMessage
from tasks_app.errors import TaskClosed
from tasks_app.models import RunHolder, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def claimed(echo_agent, monkeypatch):
    """A task of the echo agent whose run this process claimed, as a worker child does."""
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=echo_agent, principal=Principal("alice", api_key_id=1), message=message)
    assert services.run_start(task_id=task.pk, run_token=task.run_token) is not None
    task.refresh_from_db()
    return task


def _holder(beat_ago: float, **fields) -> RunHolder:
    now = timezone.now()
    return RunHolder.objects.create(
        id=fields.pop("id", uuid.uuid4()),
        host="h",
        pid=1,
        started_at=now - timedelta(hours=1),
        beat_at=now - timedelta(seconds=beat_ago),
    )


def _beat_ago(holder_id, seconds: float) -> None:
    RunHolder.objects.filter(pk=holder_id).update(beat_at=timezone.now() - timedelta(seconds=seconds))


def _retake(**kw):
    kw.setdefault("timeout", 10)
    kw.setdefault("retries", 2)
    kw.setdefault("rerunnable", {"echo"})
    return liveness.lost_holders_runs_retake(**kw)


def test_a_claim_names_this_process_as_the_run_s_holder(claimed):
    assert claimed.run_holder == holders.holder_id()
    assert claimed.run_claimed_at is not None


def test_a_beat_records_the_process_and_postgres_s_now(db):
    holders.beat()
    first = RunHolder.objects.get(pk=holders.holder_id())
    holders.beat()
    again = RunHolder.objects.get(pk=holders.holder_id())
    assert again.beat_at >= first.beat_at and again.started_at == first.started_at
    assert abs((again.beat_at - timezone.now()).total_seconds()) < 5


def test_a_run_whose_holder_fell_behind_gets_a_fresh_token_and_is_sent_again(claimed):
    holders.beat()
    _beat_ago(claimed.run_holder, 30)
    _holder(beat_ago=0)  # another process beats: Postgres is there, this one is not
    again, failed = _retake()
    task = Task.objects.get(pk=claimed.pk)
    assert again == [(claimed.pk, task.run_token)] and failed == 0
    assert task.run_token != claimed.run_token and task.run_claimed_at is None and task.run_holder is None
    assert task.run_retries == 1 and task.state == "submitted"


def test_the_old_holder_s_late_writes_are_refused_and_the_new_run_finishes_the_task(claimed):
    holders.beat()
    _beat_ago(claimed.run_holder, 30)
    _holder(beat_ago=0)
    [(task_id, fresh)] = _retake()[0]
    # The stopped worker wakes up and tries to finish its run: its token is no longer the task's.
    assert runner.run(task_id=task_id, run_token=claimed.run_token) == "not-claimed"
    with pytest.raises(TaskClosed):
        services.task_transition(task_id=task_id, run_token=claimed.run_token, state="completed")
    assert runner.run(task_id=task_id, run_token=fresh) == "done"
    task = Task.objects.get(pk=task_id)
    assert task.state == "completed" and task.artifact_count == 1
    assert sorted(task.events.values_list("seq", flat=True)) == list(range(1, task.last_seq + 1))


def test_a_holder_that_beats_keeps_its_run_however_long_it_runs(claimed):
    holders.beat()
    Task.objects.filter(pk=claimed.pk).update(run_claimed_at=timezone.now() - timedelta(hours=1))
    assert _retake() == ([], 0)
    assert Task.objects.get(pk=claimed.pk).run_token == claimed.run_token


def test_when_every_holder_fell_silent_at_once_none_is_robbed(claimed):
    """Postgres away, or the whole machine stopped: no holder is behind another."""
    holders.beat()
    _beat_ago(claimed.run_holder, 60)
    _holder(beat_ago=59)
    assert _retake() == ([], 0)
    assert Task.objects.get(pk=claimed.pk).run_token == claimed.run_token


def test_a_run_whose_holder_never_beat_counts_from_its_claim(claimed):
    _holder(beat_ago=0)
    assert not RunHolder.objects.filter(pk=claimed.run_holder).exists()
    assert _retake() == ([], 0)  # claimed just now
    Task.objects.filter(pk=claimed.pk).update(run_claimed_at=timezone.now() - timedelta(seconds=30))
    assert len(_retake()[0]) == 1


def test_a_lost_run_of_an_agent_that_may_not_run_again_fails_worker_lost(claimed):
    holders.beat()
    _beat_ago(claimed.run_holder, 30)
    _holder(beat_ago=0)
    assert _retake(rerunnable=set()) == ([], 1)
    task = Task.objects.get(pk=claimed.pk)
    assert task.state == "failed" and task.failure == "worker-lost"


def test_a_run_out_of_re_runs_fails_worker_lost(claimed):
    holders.beat()
    Task.objects.filter(pk=claimed.pk).update(run_retries=2)
    _beat_ago(claimed.run_holder, 30)
    _holder(beat_ago=0)
    assert _retake(retries=2) == ([], 1)
    assert Task.objects.get(pk=claimed.pk).failure == "worker-lost"


def test_taking_a_run_twice_changes_nothing_the_second_time(claimed):
    holders.beat()
    _beat_ago(claimed.run_holder, 30)
    _holder(beat_ago=0)
    first = _retake()
    token = Task.objects.get(pk=claimed.pk).run_token
    assert first[0] and _retake() == ([], 0)
    assert Task.objects.get(pk=claimed.pk).run_token == token


def test_with_liveness_off_nothing_is_taken(claimed):
    holders.beat()
    _beat_ago(claimed.run_holder, 3600)
    _holder(beat_ago=0)
    assert _retake(timeout=0) == ([], 0)


def test_holders_silent_for_a_day_are_forgotten_once_no_run_is_claimed(db):
    old = _holder(beat_ago=2 * 86400)
    fresh = _holder(beat_ago=0)
    assert _retake() == ([], 0)
    assert set(RunHolder.objects.values_list("pk", flat=True)) == {fresh.pk}
    assert not RunHolder.objects.filter(pk=old.pk).exists()


def test_the_lost_runs_sweep_is_on_beat_s_schedule_at_its_setting(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["sweep-lost-runs"]
    assert entry["task"] == "tasks_app.tasks.sweep_lost_runs"
    assert entry["schedule"] == settings.RUN_LIVENESS_CHECK_EVERY <= 5


def test_a_forked_process_is_a_holder_of_its_own():
    import os

    parent = holders.holder_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its id, through the pipe, then out at once
        os.write(write, holders.holder_id().bytes)
        os._exit(0)
    os.waitpid(pid, 0)
    assert uuid.UUID(bytes=os.read(read, 16)) != parent == holders.holder_id()
