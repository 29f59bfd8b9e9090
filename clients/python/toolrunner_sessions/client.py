"""``Client`` (sync) and ``AsyncClient`` (asyncio) on httpx: every route (``_base.Routes``), auto-pagination, and
``follow()`` over SSE resuming after a cut with ``Last-Event-ID``.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Dict, Iterator, Optional

import httpx

from . import errors
from ._base import RETRY_STATUSES, Request, Routes, backoff_s
from .errors import ApiError, CursorExpiredError, error_from_response
from .sse import SseParser

TERMINAL = frozenset({"idle", "failed"})
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: Reading an SSE stream: the service sends a heartbeat at least every 15 s, so 45 s of silence is a dead link.
STREAM_TIMEOUT = httpx.Timeout(5.0, read=45.0)


def _headers(api_key: Optional[str]) -> Dict[str, str]:
    headers = {"user-agent": "toolrunner-sessions-python/0.1.0"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _decode(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if response.status_code >= 400:
        raise error_from_response(response.status_code, body, response.headers)
    return body


class _Follow:
    """What the sync and async followers share: the cursor, the dedup rule and when to stop."""

    def __init__(self, after: Optional[str], max_reconnects: Optional[int]) -> None:
        self.last = after
        self.failures = 0
        self.max_reconnects = max_reconnects

    def headers(self) -> Dict[str, str]:
        h = {"accept": "text/event-stream"}
        if self.last:
            h["last-event-id"] = self.last
        return h

    def take(self, record: Dict[str, Optional[str]]) -> Optional[Dict[str, Any]]:
        """The event of one SSE record, or None for one already seen; raises on an error record."""
        data = json.loads(record["data"] or "null")
        if record["event"] == "error":
            err = (data or {}).get("error", {})
            cls = CursorExpiredError if err.get("code") == "cursor_expired" else ApiError
            raise cls(410 if cls is CursorExpiredError else 503, err.get("code", "stream_error"), err.get("message", ""))
        if record["id"] is None or (self.last is not None and not _is_after(record["id"], self.last)):
            return None
        self.last = record["id"]
        self.failures = 0
        return data

    def failed(self, err: BaseException) -> float:
        self.failures += 1
        if self.max_reconnects is not None and self.failures > self.max_reconnects:
            raise errors.ConnectionError(f"gave up after {self.failures - 1} reconnections") from err
        return backoff_s(self.failures - 1, err if isinstance(err, ApiError) else None)


def _is_after(a: str, b: str) -> bool:
    am, _, aseq = a.partition("-")
    bm, _, bseq = b.partition("-")
    return (int(am or 0), int(aseq or 0)) > (int(bm or 0), int(bseq or 0))


def _final(event: Dict[str, Any]) -> bool:
    return event.get("type") == "session.deleted"


class Client(Routes):
    """A synchronous client. ``with Client(base_url, api_key) as c: c.create_session({...})``."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        http: Optional[httpx.Client] = None,
    ) -> None:
        self.max_retries = max_retries
        self._http = http or httpx.Client(base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, request: Request) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    request.method, request.path, json=request.json, params=request.params, headers=request.headers
                )
                return _decode(response)
            except ApiError as err:
                if not request.retry or err.status not in RETRY_STATUSES or attempt >= self.max_retries:
                    raise
                time.sleep(backoff_s(attempt, err))
            except httpx.TransportError as err:
                if not request.retry or attempt >= self.max_retries:
                    raise errors.ConnectionError(str(err)) from err
                time.sleep(backoff_s(attempt, None))
            attempt += 1

    def list_all(self, **query: Any) -> Iterator[Dict[str, Any]]:
        """Every session of the caller, newest first, following ``next_cursor`` while ``has_more``."""
        cursor: Optional[str] = None
        while True:
            page = self.list_sessions(cursor=cursor, **query)
            yield from page["data"]
            if not page.get("has_more") or not page.get("next_cursor"):
                return
            cursor = page["next_cursor"]

    def follow(
        self, session_id: str, *, after: Optional[str] = None, max_reconnects: Optional[int] = None
    ) -> Iterator[Dict[str, Any]]:
        """The session's events after ``after`` (all the log holds when None), then live, each exactly once.

        A cut connection is reopened with ``Last-Event-ID`` after a backoff; events already yielded are skipped. Ends
        after ``session.deleted``; raises ``CursorExpiredError`` when the log no longer holds the cursor, and
        ``ApiError`` for 401/404. Break out of the loop to stop.
        """
        state = _Follow(after, max_reconnects)
        path = f"/v1/sessions/{session_id}/events"
        while True:
            try:
                with self._http.stream("GET", path, headers=state.headers(), timeout=STREAM_TIMEOUT) as response:
                    if response.status_code >= 400:
                        response.read()
                        _decode(response)
                    parser = SseParser()
                    for line in response.iter_lines():
                        for record in parser.feed(line):
                            event = state.take(record)
                            if event is None:
                                continue
                            yield event
                            if _final(event):
                                return
                err: BaseException = errors.ConnectionError("the stream ended")
            except ApiError as api_err:
                if api_err.status in (400, 401, 403, 404, 410) or isinstance(api_err, CursorExpiredError):
                    raise
                err = api_err
            except httpx.TransportError as transport_err:
                err = transport_err
            time.sleep(state.failed(err))

    def wait_for(self, session_id: str, *, timeout_s: float = 60.0, statuses: frozenset = TERMINAL | {"requires_action"}) -> Any:
        """Follows the session until its status is one of ``statuses``; returns the session."""
        session = self.get_session(session_id)
        if session["status"] in statuses:
            return session
        deadline = time.monotonic() + timeout_s
        for event in self.follow(session_id):
            if event["type"] == "session.status" and event["data"].get("status") in statuses:
                return self.get_session(session_id)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{session_id} did not reach {sorted(statuses)} within {timeout_s} s")
        raise errors.ConnectionError("the session was deleted")


class AsyncClient(Routes):
    """The asyncio client: the same methods as ``Client``, each awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        http: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self.max_retries = max_retries
        self._http = http or httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, request: Request) -> Any:  # type: ignore[override]
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    request.method, request.path, json=request.json, params=request.params, headers=request.headers
                )
                return _decode(response)
            except ApiError as err:
                if not request.retry or err.status not in RETRY_STATUSES or attempt >= self.max_retries:
                    raise
                await asyncio.sleep(backoff_s(attempt, err))
            except httpx.TransportError as err:
                if not request.retry or attempt >= self.max_retries:
                    raise errors.ConnectionError(str(err)) from err
                await asyncio.sleep(backoff_s(attempt, None))
            attempt += 1

    async def list_all(self, **query: Any) -> AsyncIterator[Dict[str, Any]]:
        cursor: Optional[str] = None
        while True:
            page = await self.list_sessions(cursor=cursor, **query)
            for session in page["data"]:
                yield session
            if not page.get("has_more") or not page.get("next_cursor"):
                return
            cursor = page["next_cursor"]

    async def follow(
        self, session_id: str, *, after: Optional[str] = None, max_reconnects: Optional[int] = None
    ) -> AsyncIterator[Dict[str, Any]]:
        """As ``Client.follow``."""
        state = _Follow(after, max_reconnects)
        path = f"/v1/sessions/{session_id}/events"
        while True:
            try:
                async with self._http.stream("GET", path, headers=state.headers(), timeout=STREAM_TIMEOUT) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        _decode(response)
                    parser = SseParser()
                    async for line in response.aiter_lines():
                        for record in parser.feed(line):
                            event = state.take(record)
                            if event is None:
                                continue
                            yield event
                            if _final(event):
                                return
                err: BaseException = errors.ConnectionError("the stream ended")
            except ApiError as api_err:
                if api_err.status in (400, 401, 403, 404, 410) or isinstance(api_err, CursorExpiredError):
                    raise
                err = api_err
            except httpx.TransportError as transport_err:
                err = transport_err
            await asyncio.sleep(state.failed(err))
