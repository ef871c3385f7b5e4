"""The directory of agents (issue 21). Its first migrations created the tenants, agents and
API keys that now live in `accounts` (registry migration 0005 hands them over)."""
