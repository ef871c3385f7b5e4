from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the Celery jobs in every process, not only in workers (Celery's own discovery
        # runs as a worker starts): `dispatch` sends them by name.
        # accounts checks agents' executors and settings through this hook, never importing us.
        from accounts import agent_kinds

        from . import tasks  # noqa: F401
        from .executors import REGISTRY, plugins

        def kinds() -> dict[str, agent_kinds.Kind]:
            installed = plugins.from_distributions()
            return {
                name: agent_kinds.Kind(
                    name=name,
                    description=cls.description,
                    schema=cls.settings_schema,
                    problems=cls.settings_problems,
                    built_in=name not in installed,
                    secret_required=bool(cls.secret_required),
                    on_save=cls.on_save,
                )
                for name, cls in REGISTRY.items()
            }

        agent_kinds.provide(kinds)
