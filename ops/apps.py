from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating the server: liveness and readiness probes, and the Prometheus metrics that
    the other apps count (docs/operations.md). The top of the import graph: it reads every
    layer and none reads it."""

    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
