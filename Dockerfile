# One image for the web (daphne), worker (celery), groups (the AIP group runner) and beat (celery beat)
# services of docker-compose.yml; the command is chosen per service.
FROM python:3.11-slim

# No .pyc clutter in the image; logs straight to `docker compose logs`.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# libpq5: lets a non-binary psycopg build work too; tiny next to the rest.
# (Not version-pinned: it follows the base image's Debian release.)
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libpq5 \
 && rm -rf /var/lib/apt/lists/*

# Run as an unprivileged user (celery also warns when run as root).
RUN useradd --create-home --uid 1000 app
WORKDIR /app

# Requirements first, so code changes don't re-run pip install.
COPY requirements.txt constraints.txt ./
RUN pip install -r requirements.txt

COPY --chown=app:app . .
# The admin's CSS and JS, under hashed names, into /app/staticfiles (STATIC_ROOT), where
# WhiteNoise serves them from: part of the image, owned by root, read-only to the app.
RUN python manage.py collectstatic --noinput -v 0
# Prometheus's multiprocess files (docs/operations.md): a volume the services share mounts here,
# and a new volume takes this directory's owner.
RUN mkdir /metrics-data && chown app:app /metrics-data
USER 1000:1000

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "agentserver.asgi:application"]
