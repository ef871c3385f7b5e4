from django.apps import AppConfig

from tasks_app import encoders
from tasks_app.lifecycle import Dialect


class ProtocolsConfig(AppConfig):
    """The protocol edge: each wire dialect, its endpoint and cards, over the task store."""

    name = "protocols"
    verbose_name = "Protocols"

    def ready(self) -> None:
        from .dialects.a2a_v1 import codec  # it reads the models, which are loaded only now

        encoders.register(Dialect.A2A_1_0, codec.encode_event)
