"""Django's PostgreSQL backend, with connections Postgres has ended left out (`base`)."""
