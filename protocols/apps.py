from django.apps import AppConfig

from tasks_app import encoders


class ProtocolsConfig(AppConfig):
    """The protocol edge: each wire dialect, its endpoint and cards, over the task store."""

    name = "protocols"
    verbose_name = "Protocols"

    def ready(self) -> None:
        from accounts import changes
        from push.models import SigningKey

        from . import checks  # noqa: F401 - registers the system checks
        from .dialects import DIALECTS  # they read the models, which are loaded only now

        # Web processes keep the current card key (protocols.card_signing): a new, changed or
        # deleted key is announced, so each re-reads it at once.
        changes.connect_signals(SigningKey)

        for dialect in DIALECTS:
            encoders.register(dialect.name, dialect.encode_event)
            encoders.register_task(dialect.name, dialect.encode_task)
            if dialect.encode_push is not None:
                encoders.register_push(dialect.name, dialect.encode_push)
            encoders.register_push_headers(dialect.name, dialect.push_headers)
            if dialect.state_names is not None:
                encoders.register_state_names(dialect.name, dialect.state_names)
