"""The SQL cost of the hot requests is pinned: a change that adds a query shows up here."""

import pytest

from tests.conftest import user_message

pytestmark = pytest.mark.django_db(transaction=True)


def test_send_message_with_return_immediately_writes_the_new_task_in_one_statement(
    rpc, echo_agent, alice_key, monkeypatch, django_assert_num_queries
):
    from tasks_app import dispatch

    enqueued = []
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: enqueued.append(kw))
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    rpc("/agents/acme/echo/", "GetTask", {"id": "x"}, key=alice_key)  # the key's use of the minute is recorded
    # agent + key lookups, then one statement inserting task, message, status change and event
    # (the tenant's caps on active tasks and stored bytes are checked in that statement too).
    with django_assert_num_queries(3):
        task = rpc("/agents/acme/echo/", "SendMessage", params, key=alice_key).result["task"]
    assert [str(e["task_id"]) for e in enqueued] == [task["id"]]


def test_get_task_reads_the_task_its_history_and_its_artifacts_in_one_query(
    rpc, echo_agent, alice_key, django_assert_num_queries
):
    task = rpc.send("/agents/acme/echo/", key=alice_key).result["task"]
    # agent + key lookups, then the task with its status message, history and artifacts.
    with django_assert_num_queries(3):
        fetched = rpc("/agents/acme/echo/", "GetTask", {"id": task["id"]}, key=alice_key).result
    assert fetched["artifacts"]


def test_a_run_of_the_echo_agent_costs_two_statements(echo_agent, monkeypatch, django_assert_num_queries):
    from accounts.selectors import Principal
    from tasks_app import dispatch, runner, services
    from tasks_app.domain import NewMessage

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=echo_agent, principal=Principal("alice", api_key_id=1), message=message)
    # The claim with the inputs; the artifact and the completion together.
    with django_assert_num_queries(2):
        assert runner.run(task_id=task.pk, run_token=task.run_token) == "done"


def test_a_blocking_send_message_to_the_echo_agent_costs_six_statements_end_to_end(
    rpc, echo_agent, alice_key, django_assert_num_queries
):
    rpc("/agents/acme/echo/", "GetTask", {"id": "x"}, key=alice_key)  # the key's use of the minute is recorded
    # In-process the run happens right after commit on the same connection, so this counts the
    # web's and the worker's statements together: agent + key lookups, the new task, the claim
    # with the inputs, the answer with the completion, and the final read.
    with django_assert_num_queries(6):
        task = rpc.send("/agents/acme/echo/", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED" and task["artifacts"]


def test_pushing_a_task_s_events_costs_eleven_statements_an_event_and_five_a_job(
    rpc, echo_agent, alice_key, receiver, push_jobs, django_assert_num_queries
):
    from push import delivery, signing

    inline = {"url": receiver.url()}
    rpc.send("/agents/acme/echo/", key=alice_key, configuration={"taskPushNotificationConfig": inline})
    config_pk, _ = push_jobs[0]
    push_jobs.clear()
    signing.key_for_signing()  # the first signature of a fresh install also makes the key
    events = 3  # submitted, the artifact, completed
    # Per job: take the lease; after the last event one more look (the config, no event);
    # release the lease; check that nothing came in meanwhile.
    # Per event: the config (still ours?); the next event (read through the task store's
    # selector); how often it was tried; the signing key; then one transaction under the
    # config's row lock (BEGIN, lock the config, look for the delivery row, make it with this
    # attempt's outcome, log the attempt, save the config and its lease, COMMIT). Django
    # counts BEGIN and COMMIT as statements.
    with django_assert_num_queries(5 + 11 * events):
        assert delivery.run(config_pk=config_pk) == "idle"
    assert [r.seq for r in receiver.requests] == list(range(1, events + 1))


def test_at_a_bound_host_name_a_request_costs_what_it_costs_by_path_once_the_bindings_are_cached(
    client, echo_agent, alice_key, auth_caches, django_assert_num_queries
):
    """The bindings are read in one statement per process and kept (accounts.hosts); the
    server's own names never ask."""
    import orjson

    from accounts.host_services import host_bind

    host_bind(agent=echo_agent, host="echo.example")
    task = client.post(
        "/agents/acme/echo/",
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message()}}),
        content_type="application/json",
        headers={"A2A-Version": "1.0", "X-API-Key": alice_key},
    ).json()["result"]["task"]
    get = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}})
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}

    def by(path: str, host: str) -> dict:
        answer = client.post(path, get, content_type="application/json", headers={**headers, "Host": host})
        return answer.json()["result"]

    by("/", "echo.example")  # the bindings, the agent and the key are cached now
    with django_assert_num_queries(1):  # the task alone, as by path
        assert by("/", "echo.example")["id"] == task["id"]
    with django_assert_num_queries(1):
        assert by("/agents/acme/echo/", "testserver")["id"] == task["id"]
