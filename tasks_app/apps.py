from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the Celery jobs in every process, not only in workers (Celery's own discovery
        # runs as a worker starts): `dispatch` sends them by name.
        from . import tasks  # noqa: F401
