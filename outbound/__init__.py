"""Requests this server makes to addresses someone else chose: push receivers, tenants'
OpenID Connect issuers (their JWKS), the registry's card fetches, webhook agents' endpoints.

The bottom layer, and not a Django app: it reads settings (OUTBOUND_ALLOW_NETS) and imports
nothing else of the project, so every app can use it.

- `ssrf.check(url)`: the guard. Only http(s), the host resolved once, every address it
  resolves to public (or allow-listed); the answer pins the checked address.
- `client.post` / `client.get`: one request to that checked address (the URL's name kept for
  Host and TLS), no redirects, no proxies from the environment, a timeout, a capped body.
- `client.post_streamed`: the same rules for an answer read as it arrives (webhook agents'
  actions): lines as they come, a total deadline, an idle timeout, capped lines and body.
"""
