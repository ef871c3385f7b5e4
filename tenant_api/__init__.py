"""The tenant API (/api/v1/): a tenant manages its own members, keys, issuer, agents, tasks,
push configs and deliveries over REST (docs/api.md)."""
