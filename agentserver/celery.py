import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentserver.settings")

app = Celery("agentserver")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Celery's Django fixup closes every database connection (and, in prefork children, the
# whole psycopg pool) before and after each task, so each run would open fresh Postgres
# sessions. A worker child is single-threaded: let it keep its connection for this many
# tasks (Celery then recycles it), which is what the fixup's DB_REUSE_MAX is for.
app.conf.CELERY_DB_REUSE_MAX = int(os.environ.get("CELERY_DB_REUSE_MAX", "500"))
