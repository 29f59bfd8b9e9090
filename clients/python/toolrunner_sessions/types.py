"""The service's resources as TypedDicts (checked against openapi.json by tests/test_types.py).

Total=False: the service may add fields; these name what the client reads.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Literal, Optional, Union

if sys.version_info >= (3, 11):
    from typing import TypedDict
else:  # pragma: no cover
    from typing_extensions import TypedDict

Status = Literal["running", "requires_action", "idle", "failed"]


class Usage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class ToolCall(TypedDict, total=False):
    id: str
    name: str
    input: Dict[str, Any]


class ToolResult(TypedDict, total=False):
    tool_use_id: str
    content: Union[str, List[Dict[str, Any]]]
    is_error: bool


class RequiredAction(TypedDict, total=False):
    type: str
    tool_calls: List[ToolCall]
    tool_results: List[ToolResult]


class SessionError(TypedDict, total=False):
    code: str
    message: str
    retryable: bool


class Session(TypedDict, total=False):
    id: str
    object: str
    status: Status
    revision: int
    iteration: int
    params: Dict[str, Any]
    tools: List[Any]
    max_iterations: int
    approval: Any
    review_tool_results: Any
    on_tool_error: str
    on_max_tokens: Any
    required_action: Optional[RequiredAction]
    stop_reason: Optional[str]
    error: Optional[SessionError]
    usage: Usage
    metadata: Dict[str, Any]
    created_at: str
    updated_at: str


class Event(TypedDict, total=False):
    id: str
    session_id: str
    type: str
    at: str
    revision: Optional[int]
    data: Any


class SessionList(TypedDict, total=False):
    data: List[Session]
    next_cursor: Optional[str]
    has_more: bool


class EventPage(TypedDict, total=False):
    data: List[Event]
    next_cursor: Optional[str]
    has_more: bool
