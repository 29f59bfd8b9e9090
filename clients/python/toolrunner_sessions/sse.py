"""A Server-Sent Events parser (the WHATWG rules the service's `GET …/events` stream follows).

Fed line by line; yields one dict per dispatched record: ``{"id", "event", "data"}``. Comments (``: ping``) are
heartbeats and yield nothing. Shared by the sync and async clients.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional


class SseParser:
    def __init__(self) -> None:
        self._data: List[str] = []
        self._event: Optional[str] = None
        self._id: Optional[str] = None

    def feed(self, line: str) -> Iterator[Dict[str, Optional[str]]]:
        # httpx < 0.24 keeps the line break on each line; later versions strip it.
        line = line.rstrip("\r\n")
        if line == "":
            if self._data:
                yield {"id": self._id, "event": self._event or "message", "data": "\n".join(self._data)}
            self._data, self._event = [], None
            return
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
