"""The routes of the service, once, for the sync and the async client.

Each method builds one request and hands it to ``self._call``: in ``Client`` that sends it and returns the decoded
answer, in ``AsyncClient`` it returns an awaitable of it. So the one method list serves both.

Every ``/v1`` route that answers JSON has a method here (README: "Routes"); the exceptions are the AI SDK chat
transport (``POST /v1/chat``, ``GET /v1/chat/:id/stream``: UI message streams for ``useChat``) and the WebSocket
``GET /v1/sessions/:id/stream`` (``follow()`` reads the same events over SSE). Mutations: every POST takes
``idempotency_key`` (the service honours ``Idempotency-Key`` on POST, and on ``PUT /v1/tools/:name``, whose http
runner's secret is shown once), and every route that honours
``If-Match`` takes ``if_match`` (the resource's revision).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

from ._answers import Shape
from .errors import InvalidArgumentError

Content = Union[str, List[Dict[str, Any]]]
Query = Dict[str, Union[str, int, None]]

#: Seconds a claim's answer may take beyond its ``wait_ms`` (the service answers at ``wait_ms`` at the latest).
CLAIM_MARGIN_S = 30.0


class Request:
    __slots__ = ("method", "path", "json", "params", "headers", "retry", "timeout_s", "shape")

    def __init__(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: Optional[Query] = None,
        headers: Optional[Dict[str, str]] = None,
        retry: bool = False,
        timeout_s: Optional[float] = None,
        shape: Shape = "object",
    ) -> None:
        self.method = method
        self.path = path
        self.json = json
        self.params = {k: v for k, v in (params or {}).items() if v is not None}
        self.headers = headers or {}
        # GETs, and mutations carrying an Idempotency-Key, may be sent again.
        self.retry = retry or method == "GET" or "Idempotency-Key" in self.headers
        # Seconds to wait for the answer when the client's default does not fit (a long-poll); None: the default.
        self.timeout_s = timeout_s
        self.shape = shape


def _seg(value: str) -> str:
    return quote(value, safe="")


def _memory_path(path: str) -> str:
    """A memory file's path as one segment of the URL: its "/" escaped, so no "." or ".." segment of it can take the
    request to another route (an HTTP client resolves dot segments before it sends)."""
    relative = path.lstrip("/")
    if any(part in (".", "..") for part in relative.split("/")):
        raise InvalidArgumentError(f"a memory path has no '.' or '..' segment: {path!r}")
    return quote(relative, safe="")


def _mutation_headers(if_match: Optional[int], idempotency_key: Optional[str]) -> Dict[str, str]:
    headers: Dict[str, str] = {}
    if if_match is not None:
        headers["If-Match"] = f'"{if_match}"'
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def _some(**fields: Any) -> Dict[str, Any]:
    """The fields given (not None): what a body sends of a method's optional arguments."""
    return {k: v for k, v in fields.items() if v is not None}


class Routes:
    """Every ``/v1`` route of the service that answers JSON, as a method (see the module's docstring)."""

    def _call(self, request: Request) -> Any:  # pragma: no cover - provided by the client classes
        raise NotImplementedError

    def _post(
        self, path: str, body: Any, if_match: Optional[int], idempotency_key: Optional[str], shape: Shape = "object"
    ) -> Any:
        headers = _mutation_headers(if_match, idempotency_key)
        return self._call(Request("POST", path, body, headers=headers, shape=shape))

    # Sessions
    def create_session(self, body: Mapping[str, Any], *, idempotency_key: Optional[str] = None) -> Any:
        return self._post("/v1/sessions", dict(body), None, idempotency_key, "session")

    def get_session(self, session_id: str) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}", shape="session"))

    def list_sessions(self, *, limit: Optional[int] = None, cursor: Optional[str] = None, status: Optional[str] = None) -> Any:
        params: Query = {"limit": limit, "cursor": cursor, "status": status}
        return self._call(Request("GET", "/v1/sessions", params=params, shape="page"))

    def delete_session(self, session_id: str, *, if_match: Optional[int] = None) -> Any:
        return self._call(Request("DELETE", f"/v1/sessions/{_seg(session_id)}", headers=_mutation_headers(if_match, None)))

    def update_session(self, session_id: str, changes: Mapping[str, Any], *, if_match: Optional[int] = None) -> Any:
        headers = _mutation_headers(if_match, None)
        path = f"/v1/sessions/{_seg(session_id)}"
        return self._call(Request("PATCH", path, dict(changes), headers=headers, shape="session"))

    def get_messages(self, session_id: str, *, include: Optional[str] = None) -> Any:
        """The history; ``include="compacted"`` adds what each compaction summarized."""
        path = f"/v1/sessions/{_seg(session_id)}/messages"
        return self._call(Request("GET", path, params={"include": include}, shape="page"))

    def replace_messages(
        self, session_id: str, messages: List[Mapping[str, Any]], *, if_match: Optional[int] = None
    ) -> Any:
        """``PUT …/messages``: replaces the whole history of an idle, failed or reviewing session."""
        body = {"messages": [dict(m) for m in messages]}
        path = f"/v1/sessions/{_seg(session_id)}/messages"
        return self._call(Request("PUT", path, body, headers=_mutation_headers(if_match, None), shape="session"))

    def list_children(self, session_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Any:
        """A page of the sessions the session's sub-agent calls created, oldest first (follow `next_cursor`)."""
        params: Query = {"limit": limit, "cursor": cursor}
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}/children", params=params, shape="page"))

    def list_iterations(self, session_id: str) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}/iterations", shape="page"))

    def get_iteration(self, session_id: str, n: int) -> Any:
        return self._call(Request("GET", f"/v1/sessions/{_seg(session_id)}/iterations/{int(n)}"))

    def list_events(self, session_id: str, *, after: Optional[str] = None, limit: Optional[int] = None) -> Any:
        path = f"/v1/sessions/{_seg(session_id)}/events"
        return self._call(Request("GET", path, params={"after": after, "limit": limit}, shape="page"))

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
        return self._post(f"/v1/sessions/{_seg(session_id)}/messages", body, if_match, idempotency_key, "session")

    def decide_tool_call(
        self,
        session_id: str,
        tool_use_id: str,
        decision: str,
        *,
        input: Optional[Mapping[str, Any]] = None,  # noqa: A002 - the API's field name
        reason: Optional[str] = None,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        body: Dict[str, Any] = {"decision": decision}
        if input is not None:
            body["input"] = dict(input)
        if reason is not None:
            body["reason"] = reason
        path = f"/v1/sessions/{_seg(session_id)}/tool-calls/{_seg(tool_use_id)}"
        return self._post(path, body, if_match, idempotency_key, "session")

    def approve(self, session_id: str, tool_use_id: str, **kw: Any) -> Any:
        return self.decide_tool_call(session_id, tool_use_id, "approve", **kw)

    def deny(self, session_id: str, tool_use_id: str, reason: Optional[str] = None, **kw: Any) -> Any:
        return self.decide_tool_call(session_id, tool_use_id, "deny", reason=reason, **kw)

    def submit_tool_result(
        self, session_id: str, tool_use_id: str, content: Content, *, is_error: bool = False, if_match: Optional[int] = None
    ) -> Any:
        path = f"/v1/sessions/{_seg(session_id)}/tool-results/{_seg(tool_use_id)}"
        body = {"content": content, "is_error": is_error}
        return self._call(Request("PUT", path, body, headers=_mutation_headers(if_match, None), shape="session"))

    def submit_tool_results(
        self,
        session_id: str,
        results: List[Mapping[str, Any]],
        *,
        continue_run: bool = True,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        body = {"results": [dict(r) for r in results], "continue": continue_run}
        return self._post(f"/v1/sessions/{_seg(session_id)}/tool-results", body, if_match, idempotency_key, "session")

    def _action(
        self, session_id: str, action: str, body: Any, if_match: Optional[int], idempotency_key: Optional[str]
    ) -> Any:
        return self._post(f"/v1/sessions/{_seg(session_id)}/{action}", body, if_match, idempotency_key, "session")

    def continue_run(
        self, session_id: str, *, if_match: Optional[int] = None, idempotency_key: Optional[str] = None
    ) -> Any:
        return self._action(session_id, "continue", None, if_match, idempotency_key)

    def cancel(self, session_id: str, *, if_match: Optional[int] = None, idempotency_key: Optional[str] = None) -> Any:
        return self._action(session_id, "cancel", None, if_match, idempotency_key)

    def resume(self, session_id: str, *, if_match: Optional[int] = None, idempotency_key: Optional[str] = None) -> Any:
        return self._action(session_id, "resume", None, if_match, idempotency_key)

    def retry(
        self,
        session_id: str,
        params: Optional[Mapping[str, Any]] = None,
        *,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        return self._action(session_id, "retry", {"params": dict(params)} if params else None, if_match, idempotency_key)

    def compact(
        self,
        session_id: str,
        instructions: Optional[str] = None,
        *,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        body = {"instructions": instructions} if instructions else None
        return self._action(session_id, "compact", body, if_match, idempotency_key)

    def fork(
        self,
        session_id: str,
        at_iteration: Optional[int] = None,
        *,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        """A new session whose history is this one's up to ``at_iteration``; ``if_match``: the source's revision."""
        body = {"at_iteration": at_iteration} if at_iteration is not None else {}
        return self._action(session_id, "fork", body, if_match, idempotency_key)

    # Tools: the server's, MCP servers', and the tenant's own (run by workers or an HTTP endpoint)
    def list_tools(self) -> Any:
        return self._call(Request("GET", "/v1/tools", shape="page"))

    def put_tool(
        self,
        name: str,
        definition: Mapping[str, Any],
        *,
        if_match: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        """Registers (201) or replaces (200) a tenant tool: ``{"description", "input_schema", "runner", …}``. With
        ``idempotency_key`` a repeat answers the first answer again, an http runner's ``secret`` included (it is shown
        once), and the request may be sent again after a lost answer."""
        path = f"/v1/tools/{_seg(name)}"
        headers = _mutation_headers(if_match, idempotency_key)
        return self._call(Request("PUT", path, dict(definition), headers=headers))

    def get_tool(self, name: str) -> Any:
        return self._call(Request("GET", f"/v1/tools/{_seg(name)}"))

    def delete_tool(self, name: str, *, if_match: Optional[int] = None) -> Any:
        return self._call(Request("DELETE", f"/v1/tools/{_seg(name)}", headers=_mutation_headers(if_match, None)))

    # Tool tasks: the worker protocol
    def claim_tool_tasks(
        self,
        tools: List[str],
        *,
        max: Optional[int] = None,  # noqa: A002 - the API's field name
        wait_ms: Optional[int] = None,
        worker_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        """``{"tasks": [...]}``, empty when no call came within ``wait_ms`` (a long-poll: waited for that long)."""
        body = {"tools": list(tools), **_some(max=max, wait_ms=wait_ms, worker_id=worker_id)}
        timeout_s = (wait_ms or 0) / 1000 + CLAIM_MARGIN_S
        headers = _mutation_headers(None, idempotency_key)
        return self._call(Request("POST", "/v1/tool-tasks/claim", body, headers=headers, timeout_s=timeout_s))

    def heartbeat_tool_task(self, task_id: str, *, idempotency_key: Optional[str] = None) -> Any:
        return self._post(f"/v1/tool-tasks/{_seg(task_id)}/heartbeat", None, None, idempotency_key)

    def submit_tool_task_result(
        self, task_id: str, content: Content, *, is_error: bool = False, idempotency_key: Optional[str] = None
    ) -> Any:
        """The task's result. With ``idempotency_key`` a 5xx or a lost connection is retried and answers as the first."""
        body = {"content": content, "is_error": is_error}
        return self._post(f"/v1/tool-tasks/{_seg(task_id)}/result", body, None, idempotency_key)

    # Tenant MCP servers
    def put_mcp_server(
        self, name: str, url: str, *, headers: Optional[Mapping[str, str]] = None, if_match: Optional[int] = None
    ) -> Any:
        body: Dict[str, Any] = {"url": url}
        if headers is not None:
            body["headers"] = dict(headers)
        path = f"/v1/mcp-servers/{_seg(name)}"
        return self._call(Request("PUT", path, body, headers=_mutation_headers(if_match, None)))

    def list_mcp_servers(self) -> Any:
        return self._call(Request("GET", "/v1/mcp-servers", shape="page"))

    def get_mcp_server(self, name: str) -> Any:
        return self._call(Request("GET", f"/v1/mcp-servers/{_seg(name)}"))

    def delete_mcp_server(self, name: str, *, if_match: Optional[int] = None) -> Any:
        path = f"/v1/mcp-servers/{_seg(name)}"
        return self._call(Request("DELETE", path, headers=_mutation_headers(if_match, None)))

    # Client tokens (for browsers)
    def create_client_token(
        self,
        session_id: str,
        scopes: List[str],
        *,
        ttl_s: Optional[int] = None,
        subject: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        body = {"session_id": session_id, "scopes": list(scopes), **_some(ttl_s=ttl_s, subject=subject)}
        return self._post("/v1/client-tokens", body, None, idempotency_key)

    def delete_client_token(self, token_id: str) -> Any:
        return self._call(Request("DELETE", f"/v1/client-tokens/{_seg(token_id)}"))

    # Schedules
    def create_schedule(self, body: Mapping[str, Any], *, idempotency_key: Optional[str] = None) -> Any:
        return self._post("/v1/schedules", dict(body), None, idempotency_key)

    def list_schedules(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Any:
        return self._call(Request("GET", "/v1/schedules", params={"limit": limit, "cursor": cursor}, shape="page"))

    def get_schedule(self, schedule_id: str) -> Any:
        return self._call(Request("GET", f"/v1/schedules/{_seg(schedule_id)}"))

    def update_schedule(self, schedule_id: str, changes: Mapping[str, Any], *, if_match: Optional[int] = None) -> Any:
        path = f"/v1/schedules/{_seg(schedule_id)}"
        return self._call(Request("PATCH", path, dict(changes), headers=_mutation_headers(if_match, None)))

    def delete_schedule(self, schedule_id: str, *, if_match: Optional[int] = None) -> Any:
        path = f"/v1/schedules/{_seg(schedule_id)}"
        return self._call(Request("DELETE", path, headers=_mutation_headers(if_match, None)))

    def list_schedule_runs(self, schedule_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Any:
        path = f"/v1/schedules/{_seg(schedule_id)}/runs"
        return self._call(Request("GET", path, params={"limit": limit, "cursor": cursor}, shape="page"))

    def list_schedule_events(self, schedule_id: str, *, after: Optional[str] = None, limit: Optional[int] = None) -> Any:
        path = f"/v1/schedules/{_seg(schedule_id)}/events"
        return self._call(Request("GET", path, params={"after": after, "limit": limit}, shape="page"))

    # Webhooks
    def create_webhook(
        self,
        url: str,
        events: Optional[List[str]] = None,
        description: Optional[str] = None,
        *,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        return self._post("/v1/webhooks", {"url": url, **_some(events=events, description=description)}, None, idempotency_key)

    def list_webhooks(self) -> Any:
        return self._call(Request("GET", "/v1/webhooks", shape="page"))

    def get_webhook(self, webhook_id: str) -> Any:
        return self._call(Request("GET", f"/v1/webhooks/{_seg(webhook_id)}"))

    def update_webhook(self, webhook_id: str, changes: Mapping[str, Any], *, if_match: Optional[int] = None) -> Any:
        path = f"/v1/webhooks/{_seg(webhook_id)}"
        return self._call(Request("PATCH", path, dict(changes), headers=_mutation_headers(if_match, None)))

    def delete_webhook(self, webhook_id: str, *, if_match: Optional[int] = None) -> Any:
        path = f"/v1/webhooks/{_seg(webhook_id)}"
        return self._call(Request("DELETE", path, headers=_mutation_headers(if_match, None)))

    def list_webhook_deliveries(self, webhook_id: str, *, limit: Optional[int] = None) -> Any:
        path = f"/v1/webhooks/{_seg(webhook_id)}/deliveries"
        return self._call(Request("GET", path, params={"limit": limit}, shape="page"))

    def test_webhook(self, webhook_id: str, *, idempotency_key: Optional[str] = None) -> Any:
        return self._post(f"/v1/webhooks/{_seg(webhook_id)}/test", None, None, idempotency_key)

    # Memory (the memory tool's files of the tenant); paths are relative to /memories, "/" separating directories
    def list_memory(self) -> Any:
        return self._call(Request("GET", "/v1/memory", shape="page"))

    def get_memory_file(self, path: str) -> Any:
        return self._call(Request("GET", f"/v1/memory/{_memory_path(path)}"))

    def delete_memory_file(self, path: str) -> Any:
        return self._call(Request("DELETE", f"/v1/memory/{_memory_path(path)}"))

    # Usage and chat history
    def get_usage(self, *, from_: Optional[str] = None, to: Optional[str] = None) -> Any:
        """Tokens and cost per UTC day, ``from_``..``to`` as ``YYYY-MM-DD`` (default: today)."""
        return self._call(Request("GET", "/v1/usage", params={"from": from_, "to": to}))

    def list_chat_messages(self, session_id: str) -> Any:
        """The history as the AI SDK's ``UIMessage[]``."""
        return self._call(Request("GET", f"/v1/chat/{_seg(session_id)}/messages", shape="list"))
