"""The SQL cost of the hot requests is pinned: a change that adds a query shows up here."""

import pytest

from tests.conftest import user_message

pytestmark = pytest.mark.django_db(transaction=True)


def test_send_message_with_return_immediately_costs_four_inserts_in_one_transaction(rpc, echo_agent, alice_key, monkeypatch,
                                                                 django_assert_num_queries):
    from tasks_app import tasks

    enqueued = []
    monkeypatch.setattr(tasks, "enqueue_run", lambda **kw: enqueued.append(kw))
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    # agent + key lookups, then BEGIN, inserts of task, message, status change and event, COMMIT.
    with django_assert_num_queries(8):
        task = rpc("/agents/acme/echo/", "SendMessage", params, key=alice_key).result["task"]
    assert [str(e["task_id"]) for e in enqueued] == [task["id"]]


def test_get_task_costs_five_queries(rpc, echo_agent, alice_key, django_assert_num_queries):
    task = rpc.send("/agents/acme/echo/", key=alice_key).result["task"]
    # agent + key lookups, the task (with its status message), its history, its artifacts.
    with django_assert_num_queries(5):
        fetched = rpc("/agents/acme/echo/", "GetTask", {"id": task["id"]}, key=alice_key).result
    assert fetched["artifacts"]
