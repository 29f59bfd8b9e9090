"""What the sync and async clients make of the service's answers: a route's JSON body, or the ApiError of a refusal,
or ``errors.ConnectionError`` for an answer that is not the API; whether a stream is an event stream; and how long to
wait before a retry.
"""
from __future__ import annotations

import math
import random
import re
from typing import Any, Literal, Optional

import httpx

from . import errors
from .errors import ApiError, error_from_response

#: Statuses worth another attempt when the request is safe to repeat.
RETRY_STATUSES = frozenset({429, 502, 503, 504})

#: What a route's 2xx JSON body is (``decode`` checks it; anything else is not the API): a JSON object; a JSON
#: array; a session (``object: "session"`` with its ``id``, ``status`` and ``revision``); a page (an object whose
#: ``data`` is a list).
Shape = Literal["object", "list", "session", "page"]

#: ``application/json``, or a ``+json`` type, with any parameters.
_JSON_TYPE = re.compile(r"application/(?:[\w.+-]+\+)?json\s*(?:;|$)", re.IGNORECASE)


def excerpt(text: str) -> str:
    """The start of a body, for a message."""
    return repr(text[:80] + ("…" if len(text) > 80 else ""))


def not_the_api(response: httpx.Response, why: str) -> errors.ConnectionError:
    request = response.request
    return errors.ConnectionError(f"{request.method} {request.url}: a {response.status_code} answer {why}")


def fits(body: Any, shape: Shape) -> bool:
    if shape == "list":
        return isinstance(body, list)
    if not isinstance(body, dict):
        return False
    if shape == "session":
        revision = body.get("revision")
        return (
            body.get("object") == "session"
            and isinstance(body.get("id"), str)
            and isinstance(body.get("status"), str)
            and isinstance(revision, int)
            and not isinstance(revision, bool)
        )
    return shape != "page" or isinstance(body.get("data"), list)


def decode(response: httpx.Response, shape: Shape = "object") -> Any:
    """The answer's JSON body (None for a 204 or an empty 2xx), the ApiError of a non-2xx, or ConnectionError.

    The status is looked at first: a 502/504 from a proxy often has no body, and is an error all the same (and an
    error's body that is not JSON, a proxy's page, is kept as text). A 2xx that is not the API's JSON of ``shape``
    (an HTML page from a proxy or captive portal, a body cut short, another content type, a wrong shape) is not the
    API: ``errors.ConnectionError``, the parse's error as its cause. Without a content type the body decides.
    """
    if response.status_code >= 400:
        try:
            body: Any = response.json() if response.content else None
        except ValueError:
            body = response.text
        raise error_from_response(response.status_code, body, response.headers)
    if response.status_code == 204 or not response.content:
        return None
    kind = response.headers.get("content-type")
    if kind is not None and not _JSON_TYPE.match(kind):
        raise not_the_api(response, f"of type {kind}, not the API's JSON: {excerpt(response.text)}")
    try:
        body = response.json()
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
        raise not_the_api(response, f"that is not JSON: {excerpt(response.text)}") from err
    if not fits(body, shape):
        what = "an object" if shape == "object" else f"a {shape}"
        raise not_the_api(response, f"that is not {what}: {excerpt(response.text)}")
    return body


def check_event_stream(response: httpx.Response) -> None:
    """ConnectionError for a 2xx that is not an event stream: a proxy's page, read as SSE, holds no record, and
    reconnecting would read it again for ever."""
    kind = response.headers.get("content-type", "")
    if not kind.lower().startswith("text/event-stream"):
        raise not_the_api(response, f"of type {kind or '(none)'}, not the API's event stream")


#: The longest wait a Retry-After gets (seconds): a larger one (an hour, 10²⁰ s) is waited this long, then retried.
MAX_RETRY_AFTER_S = 60.0


def backoff_s(attempt: int, error: Optional[ApiError]) -> float:
    """Retry-After when the service gave one (at most ``MAX_RETRY_AFTER_S``), else 0.5 s·2ⁿ capped at 8 s, with jitter.

    ``errors.retry_after_s`` gives None for a Retry-After that is no delay; one set otherwise (an ``ApiError`` built
    by hand) is checked here as well, since ``time.sleep`` refuses a negative or NaN wait.
    """
    wait = error.retry_after if error is not None else None
    if wait is not None and math.isfinite(wait) and wait >= 0:
        return min(wait, MAX_RETRY_AFTER_S)
    return min(0.5 * 2**attempt, 8.0) * (0.75 + random.random() / 2)
