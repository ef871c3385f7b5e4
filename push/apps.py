from django.apps import AppConfig


class PushConfig(AppConfig):
    """Push notifications (configs, signing keys, deliveries): see issue "signed push"."""

    name = "push"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"
