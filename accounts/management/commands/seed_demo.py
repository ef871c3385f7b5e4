import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.services import agent_ensure, api_key_keep, made_by_command, superuser_ensure, tenant_ensure

TEXT = ["text/plain"]
DEMO_KEY_NAME = "demo"
ADMIN_USERNAME = "admin"

DEMO_AGENTS = {
    "echo": {
        "name": "Echo",
        "description": "Answers every message with an artifact that echoes its text.",
        "executor": "echo",
        "is_public": False,
        "skills": [
            {
                "id": "echo",
                "name": "Echo",
                "description": "Echoes the text it is sent.",
                "tags": ["demo"],
                "examples": ["hello"],
            }
        ],
    },
    "conformance": {
        "name": "Conformance",
        "description": "Behaves as the official A2A conformance suite (a2a-tck) expects, by messageId prefix.",
        "executor": "conformance",
        "is_public": True,
        # The suite lists the tasks it made without a key: every caller shares one principal.
        "shared_sandbox": True,
        # It reads only the messageId, so it takes parts of any media type, as its table says
        # ("anything else: completes"). The suite sends CORE-SEND-003's part of an unknown type
        # and, in the vendored version, counts only a success as a pass, although the
        # requirement's text asks for ContentTypeNotSupportedError; agents that declare
        # narrower modes (echo, writer) get that error (tasks_app/media.py).
        "input_modes": ["text/plain", "*/*"],
        "skills": [
            {
                "id": "tck",
                "name": "TCK behaviours",
                "description": "Completes, asks for input, "
                "rejects, replies with a message or produces artifacts, as the suite asks.",
                "tags": ["test"],
            }
        ],
    },
    "writer": {
        "name": "Writer",
        "description": "Writes a short text about a topic, reporting progress and streaming it in chunks; "
        "asks for input when the request is unclear.",
        "executor": "writer",
        "is_public": False,
        "skills": [
            {
                "id": "write",
                "name": "Write",
                "description": "Writes a poem, story, summary, haiku or letter about a topic.",
                "tags": ["writing", "demo"],
                "examples": ["Write a haiku about the sea", "A story about a lighthouse keeper"],
            }
        ],
        # The server implements this one (tasks_app/executors/timestamp.py): a client that
        # activates it sees the time each message and artifact was made (docs/extensions.md).
        "extensions": [
            {
                "uri": "https://github.com/a2aproject/a2a-samples/samples/extensions/timestamp/v1",
                "description": "Timestamps in the metadata of the messages and artifacts it writes.",
                "required": False,
            }
        ],
    },
}


def _read(path: Path | None) -> str:
    try:
        return path.read_text().strip() if path is not None else ""
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None


def _keep(path: Path, secret: str) -> None:
    """Write `secret` to `path`, readable by its owner alone."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secret + "\n")
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None


class Command(BaseCommand):
    help = (
        "Create (or bring up to date) tenant 'demo' with agents echo, conformance and writer, and its one "
        "working API key (a new one, the one before revoked; with --key-file, the one kept there while it works)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print one JSON object with paths and the key")
        parser.add_argument(
            "--key-file",
            metavar="PATH",
            type=Path,
            help="keep the demo key's plaintext in PATH (owner-only): the key there is used again while it "
            "works, else a new one is written there",
        )
        parser.add_argument(
            "--admin-file",
            metavar="PATH",
            type=Path,
            help=f"for a development machine only (`make run`): make a superuser {ADMIN_USERNAME!r} if there "
            "is none, its password made once and kept in PATH (owner-only)",
        )
        # What `make run` does next, in this process rather than one Django start-up each.
        parser.add_argument(
            "--approve", metavar="REASON", help="then approve the demo's directory entries (as approve_entries)"
        )
        parser.add_argument(
            "--bind-conformance",
            metavar="HOST",
            action="append",
            default=[],
            help="then bind the conformance agent to HOST with the 0.3 card at its root (as bind_host; repeatable)",
        )

    def handle(self, *args, **options):
        summary = self._seed(as_json=options["json"], key_file=options["key_file"], admin_file=options["admin_file"])
        # What they say goes to stderr: with --json, stdout carries the one JSON object alone.
        if options["approve"] is not None:
            call_command("approve_entries", summary["tenant"], reason=options["approve"], stdout=self.stderr)
        for host in options["bind_conformance"]:
            call_command("bind_host", f"{summary['tenant']}/conformance", host, card="0.3", stdout=self.stderr)

    @transaction.atomic
    def _seed(self, *, as_json: bool, key_file: Path | None, admin_file: Path | None) -> dict:
        tenant = tenant_ensure(slug="demo", name="Demo tenant")
        agents = {
            slug: agent_ensure(
                tenant=tenant,
                slug=slug,
                defaults={
                    "version": "1.0.0",
                    "input_modes": TEXT,
                    "output_modes": TEXT,
                    **spec,
                },
            )
            for slug, spec in DEMO_AGENTS.items()
        }
        known = _read(key_file)
        _, plaintext = api_key_keep(
            tenant=tenant, name=DEMO_KEY_NAME, principal="demo", plaintext=known, made_by=made_by_command("seed_demo")
        )
        if key_file is not None and plaintext != known:
            _keep(key_file, plaintext)
        summary: dict[str, Any] = {
            "tenant": tenant.slug,
            "agents": {slug: agent.path for slug, agent in agents.items()},
            "api_key": plaintext,
            "api_key_header": "X-API-Key",
        }
        if admin_file is not None:
            summary["admin"] = self._admin(admin_file)
        if as_json:
            self.stdout.write(json.dumps(summary))
        else:
            for slug, agent in agents.items():
                self.stdout.write(f"{slug:12} {agent.path}  ({'public' if agent.is_public else 'needs a key'})")
            self.stdout.write(f"API key (X-API-Key): {plaintext}")
            if admin_file is not None:
                password = summary["admin"]["password"]
                self.stdout.write(f"Admin: {ADMIN_USERNAME} / {password or '(its own password: not kept here)'}")
        return summary

    def _admin(self, admin_file: Path) -> dict[str, Any]:
        """The development superuser: made once, its password kept in `admin_file`. One that
        exists already with another password (its owner changed it) is left alone."""
        known = _read(admin_file)
        password = known or secrets.token_urlsafe(12)
        _, signs_in = superuser_ensure(username=ADMIN_USERNAME, password=password)
        if signs_in and password != known:
            _keep(admin_file, password)
        return {"username": ADMIN_USERNAME, "password": password if signs_in else None}
