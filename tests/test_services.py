"""Writes to the task store: the state machine, the event log, claims and the sweeper."""

import uuid

import pytest
from django.utils import timezone

from accounts.selectors import Principal
from tasks_app import runner, services
from tasks_app.domain import NewArtifact, NewMessage
from tasks_app.errors import InvalidTransition, TaskClosed, TaskNotCancelable
from tasks_app.lifecycle import Dialect, TaskState
from tasks_app.models import Task, TaskEvent

ALICE = Principal(name="alice", api_key_id=1)

pytestmark = pytest.mark.usefixtures("store_path")


@pytest.fixture
def no_enqueue(monkeypatch):
    sent = []
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: sent.append(kw))
    return sent


def follow_up(acting=Dialect.A2A_1_0):
    from protocols import contract  # the rule the exchange passes, as a 1.0 client's send has it

    return contract.follow_up(acting)


def receive(agent, text="hi", **fields):
    message = NewMessage(message_id=str(uuid.uuid4()), role="user", parts=[{"type": "text", "text": text}], **fields)
    return services.message_receive(agent=agent, principal=ALICE, message=message, follow_up=follow_up())[0]


def test_receiving_a_message_writes_the_task_its_history_and_the_first_event(echo_agent, no_enqueue):
    task = receive(echo_agent)
    assert task.state == TaskState.SUBMITTED and task.owner == "alice"
    assert list(task.messages.values_list("role", flat=True)) == ["user"]
    assert list(task.status_changes.values_list("state", flat=True)) == ["submitted"]
    assert [(e.seq, e.kind, e.payload["state"]) for e in task.events.all()] == [(1, "status", "submitted")]


@pytest.mark.django_db(transaction=True)
def test_work_is_enqueued_only_after_commit_with_the_run_token(echo_agent, no_enqueue):
    from django.db import transaction

    with transaction.atomic():
        task = receive(echo_agent)
        assert no_enqueue == []
    assert no_enqueue == [{"task_id": task.pk, "run_token": task.run_token, "executor": "echo"}]


def test_every_change_appends_one_event_with_the_next_seq(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.task_transition(task_id=task.pk, state=TaskState.WORKING, parts=[{"type": "text", "text": "busy"}])
    services.artifact_append(task_id=task.pk, artifact_id="a", parts=[{"type": "text", "text": "1"}])
    services.artifact_append(
        task_id=task.pk, artifact_id="a", parts=[{"type": "text", "text": "2"}], append=True, last_chunk=True
    )
    services.task_transition(task_id=task.pk, state=TaskState.COMPLETED)
    events = list(TaskEvent.objects.filter(task=task).order_by("seq").values_list("seq", "kind"))
    assert events == [(1, "status"), (2, "status"), (3, "artifact"), (4, "artifact"), (5, "status")]
    task.refresh_from_db()
    assert task.last_seq == 5
    artifact = task.artifacts.get()
    assert [p["text"] for p in artifact.parts] == ["1", "2"] and artifact.complete


def test_events_carry_the_whole_change_as_readers_see_it(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.artifact_append(
        task_id=task.pk, artifact_id="a", name="first", parts=[{"type": "text", "text": "1"}], append=True
    )
    services.artifact_append(
        task_id=task.pk,
        artifact_id="a",
        name="ignored",
        parts=[{"type": "text", "text": "2"}],
        append=True,
        last_chunk=True,
    )
    services.task_transition(
        task_id=task.pk, state=TaskState.COMPLETED, parts=[{"type": "text", "text": "done"}], run_token=task.run_token
    )
    first, second, done = (e.payload for e in TaskEvent.objects.filter(task=task, seq__gt=1).order_by("seq"))
    assert first["artifact"]["name"] == second["artifact"]["name"] == "first"
    assert second["artifact"]["parts"] == [{"type": "text", "text": "2"}] and second["last_chunk"]
    assert done["state"] == "completed" and done["message"]["parts"] == [{"type": "text", "text": "done"}]
    assert done["message"]["context_id"] == task.context_id and done["message"]["task_id"] == str(task.pk)
    task.refresh_from_db()
    assert task.status_message.message_id == done["message"]["message_id"]
    assert task.status_changes.last().message == task.status_message


def test_an_artifact_sent_whole_again_replaces_the_stored_one_name_and_all(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.artifact_append(
        task_id=task.pk, artifact_id="a", name="draft", description="first try", parts=[{"type": "text", "text": "1"}]
    )
    services.artifact_append(task_id=task.pk, artifact_id="a", parts=[{"type": "text", "text": "2"}])
    artifact = task.artifacts.get()
    # A2A: an artifact update without `append` replaces the artifact with that id, as sent.
    assert (artifact.name, artifact.description, artifact.parts) == ("", "", [{"type": "text", "text": "2"}])
    event = TaskEvent.objects.get(task=task, seq=3).payload["artifact"]
    assert (event["name"], event["description"]) == ("", "")


def test_completing_with_an_artifact_writes_both_events_in_order_in_one_transaction(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.artifact_append(task_id=task.pk, artifact_id="a", name="first", parts=[{"type": "text", "text": "1"}])
    services.task_transition(
        task_id=task.pk,
        state=TaskState.COMPLETED,
        parts=[{"type": "text", "text": "done"}],
        run_token=task.run_token,
        artifact=NewArtifact(
            artifact_id="a", name="ignored", parts=[{"type": "text", "text": "2"}], append=True, last_chunk=True
        ),
    )
    chunk, done = (e.payload for e in TaskEvent.objects.filter(task=task, seq__gt=2).order_by("seq"))
    assert chunk["artifact"]["name"] == "first" and chunk["last_chunk"] and chunk["append"]
    assert chunk["artifact"]["parts"] == [{"type": "text", "text": "2"}]
    assert done["state"] == "completed" and done["message"]["context_id"] == task.context_id
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED and task.last_seq == 4
    artifact = task.artifacts.get()
    assert [p["text"] for p in artifact.parts] == ["1", "2"] and artifact.complete


def test_completing_with_an_artifact_writes_nothing_when_the_task_is_closed(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.task_cancel(agent=echo_agent, principal=ALICE, task_id=str(task.pk))
    with pytest.raises(TaskClosed):
        services.task_transition(
            task_id=task.pk,
            state=TaskState.COMPLETED,
            run_token=task.run_token,
            artifact=NewArtifact(artifact_id="a", parts=[{"type": "text", "text": "late"}], last_chunk=True),
        )
    task.refresh_from_db()
    assert task.state == TaskState.CANCELED and not task.artifacts.exists()
    assert task.last_seq == TaskEvent.objects.filter(task=task).count() == 2


def test_the_after_commit_hook_gets_the_task_as_written(echo_agent, no_enqueue, monkeypatch):
    seen = []
    monkeypatch.setattr(services, "_after_commit", lambda task, **_: seen.append((task.pk, task.state, task.last_seq)))
    task = receive(echo_agent)
    services.task_transition(task_id=str(task.pk), state=TaskState.WORKING)
    services.artifact_append(task_id=task.pk, parts=[{"type": "text", "text": "1"}])
    assert seen == [(task.pk, "submitted", 1), (task.pk, "working", 2), (task.pk, "working", 3)]


def test_a_terminal_task_accepts_no_more_changes(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.task_transition(task_id=task.pk, state=TaskState.COMPLETED)
    with pytest.raises(TaskClosed):
        services.task_transition(task_id=task.pk, state=TaskState.WORKING)
    with pytest.raises(TaskClosed):
        services.artifact_append(task_id=task.pk, parts=[])


def test_an_agent_cannot_move_a_working_task_back_to_submitted(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.task_transition(task_id=task.pk, state=TaskState.WORKING)
    with pytest.raises(InvalidTransition):
        services.task_transition(task_id=task.pk, state=TaskState.SUBMITTED)
    task.refresh_from_db()
    assert task.state == TaskState.WORKING and task.last_seq == 2


def test_cancel_is_refused_for_a_finished_task(echo_agent, no_enqueue):
    task = receive(echo_agent)
    services.task_cancel(agent=echo_agent, principal=ALICE, task_id=str(task.pk))
    with pytest.raises(TaskNotCancelable):
        services.task_cancel(agent=echo_agent, principal=ALICE, task_id=str(task.pk))
    task.refresh_from_db()
    assert task.state == TaskState.CANCELED
    assert task.status_changes.last().reason == "canceled by the client"


def test_a_run_is_claimed_exactly_once(echo_agent, no_enqueue):
    task = receive(echo_agent)
    assert services.run_claim(task_id=task.pk, run_token=task.run_token) is True
    assert services.run_claim(task_id=task.pk, run_token=task.run_token) is False
    assert services.run_claim(task_id=task.pk, run_token=uuid.uuid4()) is False


def test_a_stale_run_cannot_write_after_a_follow_up_started_a_new_one(writer_agent, no_enqueue):
    task = receive(writer_agent)
    old_token = task.run_token
    services.task_transition(task_id=task.pk, state=TaskState.INPUT_REQUIRED, run_token=old_token)
    receive(writer_agent, "more", task_id=str(task.pk))
    with pytest.raises(TaskClosed):
        services.task_transition(task_id=task.pk, state=TaskState.COMPLETED, run_token=old_token)


def test_the_sweeper_finds_unclaimed_work_and_fails_lost_runs(echo_agent, no_enqueue):
    stuck = receive(echo_agent)
    lost = receive(echo_agent)
    fresh = receive(echo_agent)
    long_ago = timezone.now() - timezone.timedelta(hours=1)
    Task.objects.filter(pk=stuck.pk).update(run_requested_at=long_ago)
    Task.objects.filter(pk=lost.pk).update(run_requested_at=long_ago, run_claimed_at=long_ago, state="working")
    unclaimed, failed = services.sweep_stuck_work(unclaimed_after=30, lost_after=600)
    assert [u[0] for u in unclaimed] == [stuck.pk]
    assert failed == 1
    lost.refresh_from_db()
    assert lost.state == TaskState.FAILED and lost.failure == "worker-lost"
    fresh.refresh_from_db()
    assert fresh.state == TaskState.SUBMITTED
    # Swept work is not handed out again on the very next sweep.
    assert services.sweep_stuck_work(unclaimed_after=30, lost_after=600) == ([], 0)


def test_the_queue_counts_the_runs_no_worker_took_of_active_tasks_only(echo_agent, no_enqueue):
    from tasks_app.selectors import run_queue

    waiting, canceled, claimed = receive(echo_agent), receive(echo_agent), receive(echo_agent)
    services.task_cancel(agent=echo_agent, principal=ALICE, task_id=str(canceled.pk))  # before any worker took it
    assert services.run_claim(task_id=claimed.pk, run_token=claimed.run_token)
    waiting.refresh_from_db()
    assert run_queue() == (1, waiting.run_requested_at)


def test_a_lost_run_of_a_rerunnable_executor_runs_again_until_the_retries_are_spent(echo_agent, no_enqueue):
    task = receive(echo_agent)
    long_ago = timezone.now() - timezone.timedelta(hours=1)
    tokens = []
    for attempt in (1, 2):
        Task.objects.filter(pk=task.pk).update(run_claimed_at=long_ago, state="working")
        lost_token = Task.objects.get(pk=task.pk).run_token
        unclaimed, failed = services.sweep_stuck_work(
            unclaimed_after=30, lost_after=600, retries=2, rerunnable={"echo"}
        )
        task.refresh_from_db()
        assert failed == 0 and unclaimed == [(task.pk, task.run_token)]
        assert task.run_token != lost_token and task.run_claimed_at is None and task.run_retries == attempt
        tokens.append(task.run_token)
    assert runner.run(task_id=task.pk, run_token=str(tokens[0])) == "not-claimed"  # the lost run's token is spent

    Task.objects.filter(pk=task.pk).update(run_claimed_at=long_ago, state="working")
    unclaimed, failed = services.sweep_stuck_work(unclaimed_after=30, lost_after=600, retries=2, rerunnable={"echo"})
    task.refresh_from_db()
    assert (unclaimed, failed) == ([], 1)
    assert task.state == TaskState.FAILED and task.failure == "worker-lost"
    assert task.status_changes.last().reason == "the worker running this task was lost (3 runs)"


def test_each_run_of_a_task_has_its_own_allowance_of_re_runs(writer_agent, no_enqueue):
    task = receive(writer_agent, "write")
    Task.objects.filter(pk=task.pk).update(run_claimed_at=timezone.now() - timezone.timedelta(hours=1), state="working")
    services.sweep_stuck_work(unclaimed_after=30, lost_after=600, retries=1, rerunnable={"writer"})
    assert Task.objects.get(pk=task.pk).run_retries == 1  # the first run's allowance is spent
    Task.objects.filter(pk=task.pk).update(state="input-required", run_claimed_at=timezone.now())
    receive(writer_agent, "a poem", task_id=str(task.pk))  # the client answers: a new run
    task.refresh_from_db()
    assert task.run_retries == 0 and task.state == TaskState.SUBMITTED


def test_a_lost_run_of_an_executor_not_declared_rerunnable_fails_at_once(echo_agent, no_enqueue):
    task = receive(echo_agent)
    Task.objects.filter(pk=task.pk).update(run_claimed_at=timezone.now() - timezone.timedelta(hours=1), state="working")
    assert services.sweep_stuck_work(unclaimed_after=30, lost_after=600, retries=2, rerunnable=set())[1] == 1
    task.refresh_from_db()
    assert task.failure == "worker-lost" and task.run_retries == 0


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_the_same_moment_sweep_once_and_the_unclaimed_run_is_sent_once(
    echo_agent, no_enqueue, monkeypatch, settings
):
    import threading

    from django.db import connections

    from tasks_app import tasks

    settings.SWEEP_LEASE_SECONDS = 10
    stuck = receive(echo_agent)
    Task.objects.filter(pk=stuck.pk).update(run_requested_at=timezone.now() - timezone.timedelta(hours=1))
    no_enqueue.clear()  # the send at commit, which the broker "lost"
    # The sweep that holds the lease goes on only once the other call has come and gone.
    other_returned = threading.Event()
    sweep = services.sweep_stuck_work

    def slow_sweep(**kwargs):
        other_returned.wait(5)
        return sweep(**kwargs)

    monkeypatch.setattr(services, "sweep_stuck_work", slow_sweep)
    both = threading.Barrier(2)
    results = []

    def beat_fires() -> None:
        both.wait()
        try:
            results.append(tasks.sweep_stuck_work())
        finally:
            other_returned.set()
            connections.close_all()

    threads = [threading.Thread(target=beat_fires) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert sorted(results, key=str) == ["skipped", {"requeued": 1, "failed": 0}]
    stuck.refresh_from_db()
    assert no_enqueue == [{"task_id": stuck.pk, "run_token": stuck.run_token}]


def test_the_built_in_executors_declare_themselves_safe_to_run_again():
    from tasks_app.executors import REGISTRY

    assert all(REGISTRY[name].rerunnable for name in ("echo", "writer", "conformance"))


def test_a_message_whose_parts_are_not_in_the_canonical_form_is_refused_before_anything_is_stored(
    echo_agent, no_enqueue
):
    from tasks_app.errors import InvalidParams

    message = NewMessage(message_id="m", role="user", parts=[{"text": "no type"}])
    with pytest.raises(InvalidParams, match=r"message.parts\[0\] has unknown type None"):
        services.message_receive(agent=echo_agent, principal=ALICE, message=message)
    assert not Task.objects.exists()


# --- client-chosen task ids (A2A 0.1) ----------------------------------------------------------


def test_a_client_s_id_is_kept_beside_the_key_and_found_by_either_within_agent_and_owner(
    echo_agent, writer_agent, no_enqueue
):
    from tasks_app import selectors
    from tasks_app.lifecycle import Dialect

    bob = Principal(name="bob")

    def create(agent, principal, client_id):
        message = NewMessage(message_id=str(uuid.uuid4()), role="user", parts=[{"type": "text", "text": "x"}])
        return services.message_receive(
            agent=agent, principal=principal, message=message, dialect=Dialect.A2A_0_1, client_task_id=client_id
        )[0]

    hex_id = uuid.uuid4().hex  # reads as a UUID, as 0.1 clients' ids often do
    mine = create(echo_agent, ALICE, hex_id)
    assert mine.client_task_id == hex_id and mine.pk.hex != hex_id
    bobs = create(echo_agent, bob, hex_id)
    other_agent = create(writer_agent, ALICE, hex_id)
    assert len({mine.pk, bobs.pk, other_agent.pk}) == 3
    for task_id in (hex_id, str(mine.pk), mine.pk.hex):
        found = selectors.task_with_view(task_id, agent=echo_agent, principal=ALICE)
        assert found is not None and found[0].pk == mine.pk, task_id
        assert found[1].id == hex_id and found[1].key == str(mine.pk)
        assert selectors.task_snapshot(agent=echo_agent, principal=ALICE, task_id=task_id)[0].id == hex_id
    # Bob's key does not reach Alice's task, nor her id his: each finds only its own.
    assert selectors.task_with_view(str(mine.pk), agent=echo_agent, principal=bob) is None
    assert selectors.task_key_for_caller(agent=echo_agent, principal=bob, task_id=hex_id)[0] == bobs.pk
    assert selectors.task_for_caller(agent=writer_agent, principal=ALICE, task_id=hex_id).pk == other_agent.pk
    # Cancel and follow-ups take the client's id too.
    canceled = services.task_cancel(agent=echo_agent, principal=ALICE, task_id=hex_id)
    assert canceled.pk == mine.pk and canceled.state == TaskState.CANCELED
    with pytest.raises(TaskNotCancelable, match=f"task {hex_id} is already canceled"):
        services.task_cancel(agent=echo_agent, principal=ALICE, task_id=hex_id)


def test_a_follow_up_re_opens_a_completed_task_only_when_the_contract_says_so(echo_agent, no_enqueue):
    """0.1 re-opens a completed task it made, for a 0.1 client; to anyone else, and for any task
    another dialect made, completed is final (protocols.contract). The refusal writes nothing."""
    from tasks_app.errors import UnsupportedOperation

    message = NewMessage(message_id="m1", role="user", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=echo_agent, principal=ALICE, message=message, dialect=Dialect.A2A_0_1)
    services.task_reply(task_id=task.pk, parts=[{"type": "text", "text": "done"}])
    assert Task.objects.get(pk=task.pk).reply_only
    follow = NewMessage(message_id="m2", role="user", parts=[{"type": "text", "text": "more"}], task_id=str(task.pk))
    with pytest.raises(UnsupportedOperation, match="terminal state"):
        services.message_receive(agent=echo_agent, principal=ALICE, message=follow, follow_up=follow_up())
    again, _ = services.message_receive(
        agent=echo_agent, principal=ALICE, message=follow, follow_up=follow_up(Dialect.A2A_0_1)
    )
    stored = Task.objects.get(pk=task.pk)
    assert again.pk == task.pk and stored.state == TaskState.SUBMITTED and not stored.reply_only
    assert stored.run_token != task.run_token and stored.message_count == 3
    services.task_cancel(agent=echo_agent, principal=ALICE, task_id=str(task.pk))
    with pytest.raises(UnsupportedOperation, match="is canceled"):
        services.message_receive(
            agent=echo_agent, principal=ALICE, message=follow, follow_up=follow_up(Dialect.A2A_0_1)
        )
    # A 1.0 task, completed: final for a 0.1 client too, and nothing of the follow-up is kept.
    other = receive(echo_agent)
    services.task_reply(task_id=other.pk, parts=[{"type": "text", "text": "done"}])
    before = (other.messages.count(), other.events.count(), Task.objects.get(pk=other.pk).state)
    follow = NewMessage(message_id="m3", role="user", parts=[{"type": "text", "text": "more"}], task_id=str(other.pk))
    with pytest.raises(UnsupportedOperation, match="is completed; a task in a terminal state"):
        services.message_receive(
            agent=echo_agent, principal=ALICE, message=follow, follow_up=follow_up(Dialect.A2A_0_1)
        )
    assert (other.messages.count(), other.events.count(), Task.objects.get(pk=other.pk).state) == before


def test_a_follow_up_needs_the_contract_s_rule(echo_agent, no_enqueue):
    task = receive(echo_agent)
    follow = NewMessage(message_id="m2", role="user", parts=[{"type": "text", "text": "more"}], task_id=str(task.pk))
    with pytest.raises(TypeError, match="contract"):
        services.message_receive(agent=echo_agent, principal=ALICE, message=follow)
