"""The directory's REST API under /api/registry/ (Django REST framework) and its OpenAPI
schema at /api/schema/ (drf-spectacular): views.py (the endpoints), serializers.py (what they
read and answer), represent.py (entries as the API shows them), errors.py (refusals, the
strict JSON parser)."""
