import logging

from django.apps import AppConfig
from django.db import transaction
from django.db.models.signals import post_save


class RegistryConfig(AppConfig):
    name = "registry"
    verbose_name = "Registry: the directory of agents"

    def ready(self) -> None:
        from accounts.host_services import register_domain_proof
        from accounts.models import Agent

        from . import host_proofs, tasks

        # A tenant binds a host name to its agent once it proves the name as a submitter does.
        register_domain_proof(host_proofs.DOMAIN_PROOF)

        def agent_saved(sender, instance: Agent, **kwargs) -> None:
            # The hosted agent's entry follows its card once the save commits (a worker job:
            # the request that saved the agent does not wait for it).
            agent_id = instance.pk

            def send() -> None:
                try:
                    tasks.sync_hosted_entry.delay(agent_id)
                except Exception:  # noqa: BLE001 - the broker is away: the beat job makes the entry later
                    logging.getLogger(__name__).warning("registry: could not enqueue the entry of agent %s", agent_id)

            transaction.on_commit(send)

        post_save.connect(agent_saved, sender=Agent, dispatch_uid="registry-hosted-entry", weak=False)
