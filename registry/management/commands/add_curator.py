from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.services import staff_make
from registry.curators import curators_group


class Command(BaseCommand):
    help = "Make a user a curator of the directory: staff, in the group 'Registry curators' (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--remove", action="store_true", help="take the role away instead")

    def handle(self, *args, username, remove, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        group = curators_group()
        if remove:
            user.groups.remove(group)
            self.stdout.write(f"{username} is no longer a curator")
            return
        staff_make(user=user)  # the operator's word: kept when the user's memberships end
        user.groups.add(group)
        self.stdout.write(f"{username} is a curator")
