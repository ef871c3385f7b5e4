from django.apps import AppConfig

from tasks_app import hooks


class PushConfig(AppConfig):
    """Push notifications (configs, signing keys, deliveries): see issue "signed push"."""

    name = "push"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # These read the models, which are loaded only now. `tasks` registers the Celery jobs in
        # every process, not only in workers: `dispatch` sends them by name.
        from . import dispatch, tasks  # noqa: F401

        hooks.on_task_changed(dispatch.on_task_changed)
