"""Python client of the tool-runner sessions service.

    from toolrunner_sessions import Client
    with Client("http://127.0.0.1:3000", api_key) as client:
        session = client.create_session({"input": "What is the weather in Paris?", "tools": ["get_weather"]})
        for event in client.follow(session["id"]):
            ...
"""
from .client import AsyncClient, Client
from .errors import (
    ApiError,
    ConnectionError,
    CursorExpiredError,
    InvalidArgumentError,
    ServiceError,
    WaitTimeoutError,
)
from .webhooks import WebhookVerificationError, event_id_key, verify_webhook

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConnectionError",
    "CursorExpiredError",
    "InvalidArgumentError",
    "ServiceError",
    "WaitTimeoutError",
    "WebhookVerificationError",
    "event_id_key",
    "verify_webhook",
]
__version__ = "0.1.0"
