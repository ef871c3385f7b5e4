from django.apps import AppConfig


class GroupsConfig(AppConfig):
    """AIP group mode (docs/groups.md): memberships of hosted agents in Leaders' RabbitMQ
    groups, the `group` method that creates them, and the runner that consumes them."""

    name = "groups"
    verbose_name = "AIP groups"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The handler reads the models, which are loaded only now.
        from . import core, handler

        core.register(handler.group)
