"""Verifying the service's webhook deliveries (Standard Webhooks), with the standard library only.

A delivery carries ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature: v1,<base64 HMAC-SHA256 of
"id.timestamp.body">``; the key is the base64 part of the endpoint's ``whsec_…`` secret. The same ``webhook-id``
comes with every attempt of one event: deduplicate on it. Deliveries can arrive out of order after an outage: order
by the event's ``id`` (``<ms>-<seq>``, see ``event_id_key``) when order matters.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any, Mapping, Optional, Tuple

from .errors import ServiceError

TOLERANCE_S = 5 * 60


class WebhookVerificationError(ServiceError):
    pass


def verify_webhook(secret: str, body: bytes | str, headers: Mapping[str, str], now: Optional[float] = None) -> Any:
    """Checks the signature and timestamp of a delivery and returns its event envelope (decoded JSON).

    ``body`` must be the raw body as received. Raises ``WebhookVerificationError``.
    """
    flat = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp, signatures = flat.get("webhook-id"), flat.get("webhook-timestamp"), flat.get("webhook-signature")
    if not msg_id or not stamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        ts = int(stamp)
    except ValueError as err:
        raise WebhookVerificationError("bad webhook-timestamp") from err
    if abs((time.time() if now is None else now) - ts) > TOLERANCE_S:
        raise WebhookVerificationError("timestamp too far from now")
    key = base64.b64decode(secret[len("whsec_") :] if secret.startswith("whsec_") else secret)
    raw = body.encode() if isinstance(body, str) else body
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.".encode() + raw, hashlib.sha256).digest()).decode()
    for part in signatures.split(" "):
        version, _, sig = part.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return json.loads(raw)
    raise WebhookVerificationError("no matching signature")


def event_id_key(event_id: str) -> Tuple[int, int]:
    """Sort key of an event id (``<ms>-<seq>``): ``sorted(events, key=lambda e: event_id_key(e["id"]))``."""
    ms, _, seq = event_id.partition("-")
    return (int(ms or 0), int(seq or 0))
