"""Example cards for the registry's tests, one per format, each valid and using most of what
its format offers. Functions, so that every test gets its own copy to change."""

from __future__ import annotations

from typing import Any


def a2a_1_0() -> dict[str, Any]:
    return {
        "name": "Route Planner",
        "description": "Plans cycling routes between two places.",
        "supportedInterfaces": [
            {"url": "https://agents.example.test/planner/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {
                "url": "https://agents.example.test/planner",
                "protocolBinding": "HTTP+JSON",
                "protocolVersion": "1.0",
                "tenant": "cyclists",
            },
        ],
        "provider": {"organization": "Example Mobility", "url": "https://mobility.example.test"},
        "version": "2.4.1",
        "documentationUrl": "https://docs.example.test/planner",
        "iconUrl": "https://cdn.example.test/planner.png",
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "extendedAgentCard": True,
            "extensions": [
                {
                    "uri": "https://ext.example.test/elevation/v1",
                    "description": "Elevation profiles",
                    "required": False,
                    "params": {"units": ["m", "ft"], "deep": {"deeper": {"deepest": [1, 2.5, None]}}},
                }
            ],
        },
        "securitySchemes": {
            "key": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}},
            "login": {
                "oauth2SecurityScheme": {
                    "flows": {
                        "authorizationCode": {
                            "authorizationUrl": "https://id.example.test/authorize",
                            "tokenUrl": "https://id.example.test/token",
                            "scopes": {"routes:read": "Read routes"},
                            "pkceRequired": True,
                        }
                    }
                }
            },
            "tls": {"mtlsSecurityScheme": {"description": "Client certificates"}},
        },
        "securityRequirements": [{"schemes": {"key": {"list": []}}}, {"schemes": {"login": {"list": ["routes:read"]}}}],
        "defaultInputModes": ["text/plain", "Application/JSON"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": "plan-route",
                "name": "Plan a route",
                "description": "A route between two places, avoiding busy roads.",
                "tags": ["Cycling", "routes", "cycling"],
                "examples": ["From the station to the lake, please", "Quiet roads to Utrecht"],
                "outputModes": ["application/gpx+xml"],
            },
            {
                "id": "elevation",
                "name": "Elevation profile",
                "description": "How steep a route is.",
                "tags": ["elevation"],
                "inputModes": ["application/gpx+xml"],
                "securityRequirements": [{"schemes": {"tls": {"list": []}}}],
            },
        ],
    }


def a2a_0_3() -> dict[str, Any]:
    return {
        "name": "Invoice Reader",
        "description": "Reads invoices and returns their lines.",
        "url": "https://agents.example.test/invoices/rpc",
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": "https://agents.example.test/invoices/rpc", "transport": "JSONRPC"},
            {"url": "https://grpc.example.test/invoices", "transport": "GRPC"},
            {"url": "https://agents.example.test/invoices/v1", "transport": "HTTP+JSON"},
        ],
        "protocolVersion": "0.3.0",
        "provider": {"organization": "Example Books", "url": "https://books.example.test"},
        "version": "1.0.0",
        "capabilities": {
            "streaming": False,
            "pushNotifications": True,
            "stateTransitionHistory": True,
            "extensions": [{"uri": "urn:example:trace", "required": False}],
        },
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            "oidc": {
                "type": "openIdConnect",
                "openIdConnectUrl": "https://id.example.test/.well-known/openid-configuration",
            },
        },
        "security": [{"bearer": []}, {"oidc": ["invoices"]}],
        "supportsAuthenticatedExtendedCard": True,
        "defaultInputModes": ["application/pdf", "image/png"],
        "defaultOutputModes": ["application/json"],
        "skills": [
            {
                "id": "read-invoice",
                "name": "Read an invoice",
                "description": "Lines, totals and taxes of an invoice.",
                "tags": ["finance", "OCR"],
                "examples": ["What is the total of this invoice?"],
                "security": [{"bearer": []}],
            }
        ],
    }


def a2a_0_1() -> dict[str, Any]:
    return {
        "name": "Weather Teller",
        "description": "Tells the weather for a city.",
        "url": "https://agents.example.test/weather",
        "provider": {"organization": "Example Skies", "url": "https://skies.example.test"},
        "version": "0.9",
        "documentationUrl": "https://skies.example.test/docs",
        "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": True},
        "authentication": {"schemes": ["Bearer", "API Key", "Kerberos"]},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [
            {
                "id": "forecast",
                "name": "Forecast",
                "description": "The forecast for the next days.",
                "tags": ["weather"],
                "examples": ["Will it rain in Delft tomorrow?"],
            }
        ],
    }


def acs() -> dict[str, Any]:
    return {
        "aic": "1.2.156.3088.1.34C2.478BDF.3GF546.1.0SEN",
        "active": True,
        "lastModifiedTime": "2026-03-15T16:30:00+08:00",
        "protocolVersion": "02.02",
        "name": "Museum Guide",
        "description": "Suggests museums and plans visits.",
        "version": "1.2.0",
        "iconUrl": "https://cdn.example.test/guide.png",
        "documentationUrl": "https://docs.example.test/guide",
        "webAppUrl": "https://app.example.test/guide",
        "provider": {
            "countryCode": "CN",
            "organization": "Example Culture Lab",
            "department": "",
            "url": "https://culture.example.test",
            "license": "ICP 000000-1",
            "domainRegistrations": [
                {"domain": "example.test", "registrationNumber": "R-1", "registrationType": "WHOIS"}
            ],
        },
        "securitySchemes": {
            "mtls": {"type": "mutualTLS", "description": "Agents authenticate each other"},
            "oidc": {
                "type": "openIdConnect",
                "openIdConnectUrl": "https://id.example.test/.well-known/openid-configuration",
            },
        },
        "endPoints": [
            {"url": "https://api.example.test/guide/rpc", "transport": "JSONRPC", "security": [{"mtls": []}]},
            {"url": "https://api.example.test/guide/v2", "transport": "HTTP_JSON", "security": [{"oidc": ["profile"]}]},
            {"url": "amqps://mq.example.test:5671/acps?inbox=inbox_{AIC}", "transport": "AMQP"},
        ],
        "capabilities": {"streaming": True, "notification": True, "messageQueue": ["rabbitmq:3.*"]},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain", "text/markdown"],
        "skills": [
            {
                "id": "guide.museums",
                "name": "Museum suggestions",
                "description": "Museums to visit, by interest.",
                "version": "1.0.0",
                "tags": ["museums", "culture"],
                "examples": ["A museum for a rainy afternoon with children"],
            }
        ],
    }


EXAMPLES = {"1.0": a2a_1_0, "0.3": a2a_0_3, "0.1": a2a_0_1, "acs": acs}
