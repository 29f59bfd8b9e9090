"""``Client`` (sync) and ``AsyncClient`` (asyncio) on httpx: every route (``_base.Routes``), auto-pagination, and
``follow()`` over SSE resuming after a cut with ``Last-Event-ID``.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any, AsyncGenerator, AsyncIterator, Dict, FrozenSet, Generator, Iterator, Optional

import httpx

from . import errors
from ._answers import RETRY_STATUSES, backoff_s, check_event_stream, decode, excerpt
from ._base import Request, Routes, _seg
from .errors import ApiError, CursorExpiredError, WaitTimeoutError
from .sse import SseParser

TERMINAL = frozenset({"idle", "failed"})
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: Reading an SSE stream: the service sends a heartbeat at least every 15 s, so 45 s of silence is a dead link.
STREAM_READ_S = 45.0
STREAM_CONNECT_S = 5.0
#: How far past its deadline ``wait_for`` may return (seconds): a stream whose reads could outlast it by more is
#: reopened with the time that is left as its read timeout.
DEADLINE_SLACK_S = 0.5


def _headers(api_key: Optional[str]) -> Dict[str, str]:
    headers = {"user-agent": "toolrunner-sessions-python/0.1.0"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _timeout(request: Request) -> Any:
    return httpx.USE_CLIENT_DEFAULT if request.timeout_s is None else httpx.Timeout(request.timeout_s, connect=5.0)


def _left(deadline: Optional[float], cap: float) -> float:
    """Seconds until ``deadline`` (monotonic), at most ``cap`` (``cap`` when there is none); TimeoutError once past."""
    if deadline is None:
        return cap
    left = deadline - time.monotonic()
    if left <= 0:
        raise WaitTimeoutError("the deadline passed")
    return min(left, cap)


def _stream_timeout(read_s: float) -> httpx.Timeout:
    return httpx.Timeout(min(STREAM_CONNECT_S, read_s), read=read_s)


def _outlasts(deadline: Optional[float], read_s: float) -> bool:
    """Whether the stream's next read, bounded by ``read_s``, could end past ``deadline`` by more than the slack.

    httpx fixes a stream's read timeout when it opens, and heartbeats (every 15 s) end each read early, so a read
    timeout alone never trips a deadline: the stream is reopened (after its last event, so nothing is lost) with the
    time that is left instead.
    """
    return deadline is not None and read_s - (deadline - time.monotonic()) > DEADLINE_SLACK_S


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
        """The event of one SSE record, or None for one already seen; raises on an error record.

        Every record of the service's stream is a JSON object under an event id (``<ms>-<seq>``); a record that is
        not (a proxy's page, a body cut short) is not the API: ``errors.ConnectionError``, which ends the follow
        rather than skip the record (an event could be lost unseen) or reconnect (the same would come again).
        """
        raw = record["data"] or ""
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise errors.ConnectionError(f"the event stream sent a record that is not JSON: {excerpt(raw)}") from err
        if not isinstance(data, dict):
            raise errors.ConnectionError(f"the event stream sent a record that is not a JSON object: {excerpt(raw)}")
        if record["id"] is not None and not _EVENT_ID.fullmatch(record["id"]):
            raise errors.ConnectionError(f"the event stream sent a record under {record['id']!r}, not an event id")
        if record["event"] == "error":
            err = data.get("error")
            if not isinstance(err, dict):
                raise errors.ConnectionError(f"the event stream sent an error record without an error: {excerpt(raw)}")
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


#: An event id: ``<ms>-<seq>``.
_EVENT_ID = re.compile(r"[0-9]+-[0-9]+")


def _is_after(a: str, b: str) -> bool:
    am, _, aseq = a.partition("-")
    bm, _, bseq = b.partition("-")
    return (int(am or 0), int(aseq or 0)) > (int(bm or 0), int(bseq or 0))


def _final(event: Dict[str, Any]) -> bool:
    return event.get("type") == "session.deleted"


def _newer_match(event: Dict[str, Any], revision: int, statuses: FrozenSet[str]) -> bool:
    """A ``session.status`` event to one of ``statuses``, newer than the session read at ``revision``.

    Every status change writes such an event at the revision it makes, so one at or below ``revision`` (replayed
    from the log) is already part of what that read saw; one without a revision is taken as newer.
    """
    if event.get("type") != "session.status" or (event.get("data") or {}).get("status") not in statuses:
        return False
    event_revision = event.get("revision")
    return event_revision is None or event_revision > revision


def _deleted(session_id: str) -> ApiError:
    return ApiError(404, "session_not_found", f"Session {session_id} was deleted.")


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
                    request.method,
                    request.path,
                    json=request.json,
                    params=request.params,
                    headers=request.headers,
                    timeout=_timeout(request),
                )
                return decode(response, request.shape)
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
        after ``session.deleted``; raises ``CursorExpiredError`` when the log no longer holds the cursor,
        ``ApiError`` for 401/404, and ``ConnectionError`` at once (not reconnecting) for a stream that is not the
        API's (another content type, a record that is not an event). Break out of the loop to stop.
        """
        return self._follow(session_id, _Follow(after, max_reconnects), None)

    def _follow(
        self, session_id: str, state: _Follow, deadline: Optional[float]
    ) -> Generator[Dict[str, Any], None, None]:
        """``follow()``, and with a ``deadline`` (monotonic) raising TimeoutError once it passes, waiting or reading."""
        path = f"/v1/sessions/{_seg(session_id)}/events"
        while True:
            read_s = _left(deadline, STREAM_READ_S)
            err: Optional[BaseException] = None
            try:
                with self._http.stream(
                    "GET", path, headers=state.headers(), timeout=_stream_timeout(read_s)
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        decode(response)
                    check_event_stream(response)
                    parser = SseParser()
                    for line in response.iter_lines():
                        for record in parser.feed(line):
                            event = state.take(record)
                            if event is None:
                                continue
                            yield event
                            if _final(event):
                                return
                        if _outlasts(deadline, read_s):
                            break  # reopened at once with a shorter read timeout: not a failure
                    else:
                        err = errors.ConnectionError("the stream ended")
            except ApiError as api_err:
                if api_err.status in (400, 401, 403, 404, 410) or isinstance(api_err, CursorExpiredError):
                    raise
                err = api_err
            except httpx.TransportError as transport_err:
                err = transport_err
            if err is not None:
                time.sleep(_left(deadline, state.failed(err)))

    def wait_for(
        self,
        session_id: str,
        *,
        timeout_s: float = 60.0,
        statuses: FrozenSet[str] = TERMINAL | {"requires_action"},
    ) -> Any:
        """The session once its status is one of ``statuses``: at once if it is already, else when a newer
        ``session.status`` event says so and the session, read again, still is. TimeoutError after ``timeout_s``
        (heartbeats or not); ``ApiError`` 404 ``session_not_found`` if the session is deleted meanwhile.
        """
        deadline = time.monotonic() + timeout_s
        first = self.get_session(session_id)
        if first["status"] in statuses:
            return first
        # From the start of the log, so a change between the read above and the subscription is not missed; the
        # status events up to the revision read above are older than that read and skipped.
        events = self._follow(session_id, _Follow(None, None), deadline)
        try:
            for event in events:
                if _newer_match(event, first["revision"], statuses):
                    session = self.get_session(session_id)
                    if session["status"] in statuses:
                        return session
        except TimeoutError:
            raise WaitTimeoutError(f"{session_id} did not reach {sorted(statuses)} within {timeout_s} s") from None
        finally:
            events.close()  # closes the stream now, not when the generator is collected
        raise _deleted(session_id)


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
                    request.method,
                    request.path,
                    json=request.json,
                    params=request.params,
                    headers=request.headers,
                    timeout=_timeout(request),
                )
                return decode(response, request.shape)
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
    ) -> AsyncGenerator[Dict[str, Any], None]:
        """As ``Client.follow``."""
        state = _Follow(after, max_reconnects)
        path = f"/v1/sessions/{_seg(session_id)}/events"
        while True:
            try:
                async with self._http.stream(
                    "GET", path, headers=state.headers(), timeout=_stream_timeout(STREAM_READ_S)
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        decode(response)
                    check_event_stream(response)
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

    async def wait_for(
        self,
        session_id: str,
        *,
        timeout_s: float = 60.0,
        statuses: FrozenSet[str] = TERMINAL | {"requires_action"},
    ) -> Any:
        """As ``Client.wait_for``."""
        try:
            return await asyncio.wait_for(self._wait_for(session_id, statuses), timeout_s)
        except asyncio.TimeoutError:
            raise WaitTimeoutError(f"{session_id} did not reach {sorted(statuses)} within {timeout_s} s") from None

    async def _wait_for(self, session_id: str, statuses: FrozenSet[str]) -> Any:
        first = await self.get_session(session_id)
        if first["status"] in statuses:
            return first
        events = self.follow(session_id)
        try:
            async for event in events:
                if _newer_match(event, first["revision"], statuses):
                    session = await self.get_session(session_id)
                    if session["status"] in statuses:
                        return session
        finally:
            await events.aclose()  # closes the stream now, not when the generator is collected
        raise _deleted(session_id)
