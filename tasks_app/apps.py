from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"
    default_auto_field = "django.db.models.BigAutoField"
