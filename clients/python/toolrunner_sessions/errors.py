"""Errors of the service, as exceptions carrying the error envelope's stable code.

Every refusal of the service is ``{"error": {"code", "message", "details"?}}`` with an HTTP status; ``ApiError``
carries all four. ``ConnectionError`` is raised when the service could not be reached (after the client's retries),
or answered something that is not the API.
"""
from __future__ import annotations

import email.utils
import math
import re
import time
from datetime import timezone
from typing import Any, Optional


class ServiceError(Exception):
    """Base class of every error this package raises."""


class ApiError(ServiceError):
    """The service answered with an error envelope (or a non-2xx status without one)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        retry_after: Optional[float] = None,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        """429 and 503 may succeed later (see ``retry_after``)."""
        return self.status in (429, 503)


class InvalidArgumentError(ServiceError, ValueError):
    """An argument refused before anything is sent (a memory path with a ``.`` or ``..`` segment); a ``ValueError``."""


class WaitTimeoutError(ServiceError, TimeoutError):
    """``wait_for`` (or a ``follow`` with a deadline) ran out of time; a ``TimeoutError``."""


class CursorExpiredError(ApiError):
    """The event log no longer holds the cursor (410 ``cursor_expired``): restart from the session's state."""


class ConnectionError(ServiceError):  # noqa: A001 - the package's own name, as the TypeScript client's
    """The service could not be reached (after the retries), or answered something that is not the API.

    Not the API: a 2xx whose body is not JSON (a proxy's or captive portal's HTML page, a body cut short; the parse's
    error is the ``__cause__``), whose content type is not JSON, or whose JSON is not what its route answers; an
    event stream answered with another content type, or carrying a record that is not an event. Such an answer is
    not retried (a 2xx may have done its work), and ``follow()`` does not reconnect after one: the same would come.
    """


def error_from_response(status: int, body: Any, headers: Any) -> ApiError:
    """Builds the exception for a non-2xx answer from its decoded JSON body (or text) and headers."""
    code, message, details = "http_error", f"HTTP {status}", None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code", code))
        message = str(err.get("message", message))
        details = err.get("details")
    retry_after = retry_after_s(headers.get("retry-after") if headers is not None else None)
    request_id = headers.get("x-request-id") if headers is not None else None
    cls = CursorExpiredError if code == "cursor_expired" else ApiError
    return cls(status, code, message, details, retry_after, request_id)


#: delay-seconds: digits (a fraction is taken too). Not ``float()``: it reads "-5", "nan", "inf", "1e400" and "1_0".
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def retry_after_s(raw: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``Retry-After`` in seconds (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date (0 once past).

    None for anything else (a negative number, ``NaN``, garbage): no delay was given, and the client backs off on its
    own. How long it waits at most is the caller's (``_answers.backoff_s`` caps it).
    """
    value = (raw or "").strip()
    if _SECONDS.fullmatch(value):
        return float(value)
    try:
        at = email.utils.parsedate_to_datetime(value)
        if at is None:  # Python < 3.10 on some inputs
            return None
        # asctime's form has no zone: HTTP-dates are all in GMT.
        seconds = (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    seconds -= time.time() if now is None else now
    return max(0.0, seconds) if math.isfinite(seconds) else None
