"""ASGI entry point for daphne: `daphne agentserver.asgi:application`."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentserver.settings")

# Django must be set up before anything imports models (Channels consumers will, later).
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

application = ProtocolTypeRouter({"http": django_application})
