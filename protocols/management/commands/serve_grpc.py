import asyncio

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from protocols import grpc_server


class Command(BaseCommand):
    help = (
        "Serve A2A 1.0 over gRPC (lf.a2a.v1.A2AService, and the standard health service) until SIGTERM: "
        "the third binding, beside daphne's JSON-RPC and HTTP+JSON (docs/bindings.md)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=None, help="the port (default: GRPC_PORT; 0 picks one)")
        parser.add_argument(
            "-b",
            "--bind",
            action="append",
            default=None,
            help="an address to listen on, as many times as needed (default 127.0.0.1); a call that names "
            "no agent reaches the one bound to the address it came to (bind_host)",
        )

    def handle(self, *args, port, bind, **options):
        port = settings.GRPC_PORT if port is None else port
        if port is None or port < 0:
            raise CommandError("no port: set GRPC_PORT or pass --port")

        def ready(running: grpc_server.Running) -> None:
            where = ", ".join(f"{host}:{p}" for host, p in zip(bind or ["127.0.0.1"], running.ports, strict=True))
            self.stdout.write(f"gRPC: serving lf.a2a.v1.A2AService on {where}", ending="\n")
            self.stdout.flush()

        asyncio.run(grpc_server.serve(bind or ["127.0.0.1"], port, ready=ready))
