import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentserver.settings")


def _task_class() -> str:
    """With BACKGROUND_WORK=threads (the embedded mode) a publish runs the job on this
    process's threads instead (agentserver/background.py)."""
    from django.conf import settings

    return "agentserver.background:ThreadTask" if settings.BACKGROUND_WORK == "threads" else "celery.app.task:Task"


app = Celery("agentserver", task_cls=_task_class())


def _settings() -> dict:
    """Django's CELERY_* settings, read once. Celery looks settings up several times per
    published message; through `django.conf.settings` with a namespace each lookup tries the
    prefixed and the bare key on every map, each miss an exception (~15 % of a publish)."""
    from django.conf import settings

    return {
        name[len("CELERY_") :].lower(): getattr(settings, name) for name in dir(settings) if name.startswith("CELERY_")
    }


app.config_from_object(_settings())
app.autodiscover_tasks()

# Celery's Django fixup closes every database connection (and, in prefork children, the
# whole psycopg pool) before and after each task, so each run would open fresh Postgres
# sessions. A worker child is single-threaded: let it keep its connection for this many
# tasks (Celery then recycles it), which is what the fixup's DB_REUSE_MAX is for.
app.conf.CELERY_DB_REUSE_MAX = int(os.environ.get("CELERY_DB_REUSE_MAX", "500"))


@signals.worker_process_init.connect
def _trace(**_: object) -> None:
    # Each prefork child once forked (a provider made before the fork would export from a
    # thread the child does not have): agentserver/tracing.py, off unless configured.
    from agentserver import tracing

    tracing.configure(service="agentserver-worker")


@signals.worker_process_init.connect
def _beat(**_: object) -> None:
    # Each prefork child, the process that claims runs, proves it is alive (tasks_app.holders).
    from tasks_app import holders

    holders.start_heartbeat()


@signals.worker_shutting_down.connect
def _drain_runs(**_: object) -> None:
    # A warm shutdown: the run host's runs in flight get SHUTDOWN_GRACE seconds to finish, then
    # hand their tasks back (tasks_app/runhost.py); Celery waits for their pool threads.
    from django.conf import settings

    from tasks_app import runhost

    runhost.drain(settings.SHUTDOWN_GRACE)


@signals.worker_process_shutdown.connect
def _flush_traces(**_: object) -> None:
    from agentserver import tracing

    tracing.shutdown()


@signals.worker_init.connect
@signals.worker_process_init.connect
def _tune_gc(**_: object) -> None:
    # The main process once started, and each prefork child once forked: agentserver/runtime.py.
    from agentserver import runtime

    runtime.tune_gc()


@signals.task_prerun.connect
def _drop_dead_connections(**_: object) -> None:
    # After a Postgres restart the connection this child kept is dead: give it up before the
    # run, not hundreds of failed runs later (agentserver/runtime.py).
    from agentserver import runtime

    runtime.drop_dead_connections()


@signals.worker_ready.connect
def _serve_metrics(**_: object) -> None:
    # The main process, after the pool forked its first children (so they start without the
    # server's socket or its thread's locks): their counts on WORKER_METRICS_PORT, when set
    # (ops/metrics.py).
    from ops import metrics

    metrics.serve_worker()
