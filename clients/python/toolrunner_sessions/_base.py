"""The routes of the service, once, for the sync and the async client.

Each method builds one request and hands it to ``self._call``: in ``Client`` that sends it and returns the decoded
answer, in ``AsyncClient`` it returns an awaitable of it. So the one method list serves both.
"""
from __future__ import annotations

import random
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

from .errors import ApiError

Content = Union[str, List[Dict[str, Any]]]
Query = Dict[str, Union[str, int, None]]

#: Statuses worth another attempt when the request is safe to repeat.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


class Request:
    __slots__ = ("method", "path", "json", "params", "headers", "retry")

    def __init__(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: Optional[Query] = None,
        headers: Optional[Dict[str, str]] = None,
        retry: bool = False,
    ) -> None:
        self.method = method
        self.path = path
        self.json = json
        self.params = {k: v for k, v in (params or {}).items() if v is not None}
        self.headers = headers or {}
        # GETs, and POSTs carrying an Idempotency-Key, may be sent again.
        self.retry = retry or method == "GET" or "Idempotency-Key" in self.headers


def _seg(value: str) -> str:
    return quote(value, safe="")


def _mutation_headers(if_match: Optional[int], idempotency_key: Optional[str]) -> Dict[str, str]:
    headers: Dict[str, str] = {}
    if if_match is not None:
        headers["If-Match"] = f'"{if_match}"'
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def backoff_s(attempt: int, error: Optional[ApiError]) -> float:
    """Retry-After when the service gave one, else 0.5 s·2ⁿ capped at 8 s, with jitter."""
    if error is not None and error.retry_after is not None:
        return min(error.retry_after, 60.0)
    return min(0.5 * 2**attempt, 8.0) * (0.75 + random.random() / 2)


class Routes:
    """Every route of the service's REST API as a method."""

    def _call(self, request: Request) -> Any:  # pragma: no cover - provided by the client classes
        raise NotImplementedError

    # Sessions
    def create_session(self, body: Mapping[str, Any], *, idempotency_key: Optional[str] = None) -> Any:
        return self._call(Request("POST", "/v1/sessions", dict(body), headers=_mutation_headers(None, idempotency_key)))

    def get_session(self, session_id: str) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}"))

    def list_sessions(self, *, limit: Optional[int] = None, cursor: Optional[str] = None, status: Optional[str] = None) -> Any:
        return self._call(Request("GET", "/v1/sessions", params={"limit": limit, "cursor": cursor, "status": status}))

    def delete_session(self, session_id: str) -> Any:
        return self._call(Request("DELETE", f"/v1/sessions/{_seg(session_id)}"))

    def update_session(self, session_id: str, changes: Mapping[str, Any], *, if_match: Optional[int] = None) -> Any:
        return self._call(
            Request("PATCH", f"/v1/sessions/{_seg(session_id)}", dict(changes), headers=_mutation_headers(if_match, None))
        )

    def get_messages(self, session_id: str) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}/messages"))

    def list_iterations(self, session_id: str) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}/iterations"))

    def get_iteration(self, session_id: str, n: int) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}/iterations/{int(n)}"))

    def list_events(self, session_id: str, *, after: Optional[str] = None, limit: Optional[int] = None) -> Any:
        return self._call(
            Request("GET", f"/v1/sessions/{_seg(session_id)}/events", params={"after": after, "limit": limit})
        )

    # Steering
    def send_message(
        self,
        session_id: str,
        content: Content,
        *,
        interrupt: bool = False,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        body: Dict[str, Any] = {"content": content}
        if interrupt:
            body["interrupt"] = True
        return self._call(
            Request(
                "POST",
                f"/v1/sessions/{_seg(session_id)}/messages",
                body,
                headers=_mutation_headers(if_match, idempotency_key),
            )
        )

    def decide_tool_call(
        self,
        session_id: str,
        tool_use_id: str,
        decision: str,
        *,
        input: Optional[Mapping[str, Any]] = None,  # noqa: A002 - the API's field name
        reason: Optional[str] = None,
        if_match: Optional[int] = None,
    ) -> Any:
        body: Dict[str, Any] = {"decision": decision}
        if input is not None:
            body["input"] = dict(input)
        if reason is not None:
            body["reason"] = reason
        path = f"/v1/sessions/{_seg(session_id)}/tool-calls/{_seg(tool_use_id)}"
        return self._call(Request("POST", path, body, headers=_mutation_headers(if_match, None)))

    def approve(self, session_id: str, tool_use_id: str, **kw: Any) -> Any:
        return self.decide_tool_call(session_id, tool_use_id, "approve", **kw)

    def deny(self, session_id: str, tool_use_id: str, reason: Optional[str] = None, **kw: Any) -> Any:
        return self.decide_tool_call(session_id, tool_use_id, "deny", reason=reason, **kw)

    def submit_tool_result(
        self, session_id: str, tool_use_id: str, content: Content, *, is_error: bool = False, if_match: Optional[int] = None
    ) -> Any:
        path = f"/v1/sessions/{_seg(session_id)}/tool-results/{_seg(tool_use_id)}"
        body = {"content": content, "is_error": is_error}
        return self._call(Request("PUT", path, body, headers=_mutation_headers(if_match, None)))

    def submit_tool_results(
        self, session_id: str, results: List[Mapping[str, Any]], *, continue_run: bool = True, if_match: Optional[int] = None
    ) -> Any:
        body = {"results": [dict(r) for r in results], "continue": continue_run}
        return self._call(
            Request("POST", f"/v1/sessions/{_seg(session_id)}/tool-results", body, headers=_mutation_headers(if_match, None))
        )

    def _action(self, session_id: str, action: str, body: Any = None, if_match: Optional[int] = None) -> Any:
        path = f"/v1/sessions/{_seg(session_id)}/{action}"
        return self._call(Request("POST", path, body, headers=_mutation_headers(if_match, None)))

    def continue_run(self, session_id: str, *, if_match: Optional[int] = None) -> Any:
        return self._action(session_id, "continue", None, if_match)

    def cancel(self, session_id: str, *, if_match: Optional[int] = None) -> Any:
        return self._action(session_id, "cancel", None, if_match)

    def resume(self, session_id: str, *, if_match: Optional[int] = None) -> Any:
        return self._action(session_id, "resume", None, if_match)

    def retry(self, session_id: str, params: Optional[Mapping[str, Any]] = None, *, if_match: Optional[int] = None) -> Any:
        return self._action(session_id, "retry", {"params": dict(params)} if params else None, if_match)

    def compact(self, session_id: str, instructions: Optional[str] = None) -> Any:
        return self._action(session_id, "compact", {"instructions": instructions} if instructions else None)

    def fork(self, session_id: str, at_iteration: Optional[int] = None) -> Any:
        return self._action(session_id, "fork", {"at_iteration": at_iteration} if at_iteration is not None else {})

    # Other resources
    def list_tools(self) -> Any:
        return self._call(Request("GET", "/v1/tools"))

    def create_webhook(self, url: str, events: Optional[List[str]] = None, description: Optional[str] = None) -> Any:
        body: Dict[str, Any] = {"url": url}
        if events is not None:
            body["events"] = events
        if description is not None:
            body["description"] = description
        return self._call(Request("POST", "/v1/webhooks", body))

    def list_webhooks(self) -> Any:
        return self._call(Request("GET", "/v1/webhooks"))

    def delete_webhook(self, webhook_id: str) -> Any:
        return self._call(Request("DELETE", f"/v1/webhooks/{_seg(webhook_id)}"))

    def list_memory(self) -> Any:
        return self._call(Request("GET", "/v1/memory"))
