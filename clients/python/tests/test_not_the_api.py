"""The Python clients against a server that is not the API: a local HTTP server on 127.0.0.1 answers a proxy's HTML
page, a truncated body, another content type or shape, a Retry-After that is no delay, an SSE stream whose records
are not the API's. Each must end in the package's own errors (``ConnectionError`` for "not the API"), never a raw
``JSONDecodeError``, ``KeyError``, ``TypeError`` or ``ValueError``, and a Retry-After that is no delay must be backed
off from. Needs no service (run by test/clients/python-client.test.ts with the rest of ``tests/``).
"""
from __future__ import annotations

import asyncio
import email.utils
import http.server
import os
import sys
import threading
import time
import typing
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from toolrunner_sessions import ApiError, AsyncClient, Client, ConnectionError  # noqa: E402
from toolrunner_sessions.errors import error_from_response  # noqa: E402

HTML = b"<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>"
SESSION = b'{"id": "ses_x", "object": "session", "status": "running", "revision": 1}'
RATE_LIMITED = b'{"error": {"code": "rate_limited", "message": "Too many requests."}}'

#: (status, content type or None, body, extra headers)
Answer = typing.Tuple[int, typing.Optional[str], bytes, typing.Dict[str, str]]


def answer(body: bytes, kind: typing.Optional[str] = "application/json", status: int = 200, **headers: str) -> Answer:
    return (status, kind, body, {k.replace("_", "-"): v for k, v in headers.items()})


class _Server(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``next(path)`` and records when it came."""

    protocol_version = "HTTP/1.1"
    next: "typing.Callable[[str], Answer]" = staticmethod(lambda path: answer(b""))  # type: ignore[assignment]
    hits: "typing.List[typing.Tuple[str, float]]" = []

    def _handle(self) -> None:
        self.hits.append((f"{self.command} {self.path}", time.monotonic()))
        length = int(self.headers.get("content-length", "0"))
        if length:
            self.rfile.read(length)
        status, kind, body, headers = type(self).next(self.path)
        self.send_response(status)
        if kind is not None:
            self.send_header("content-type", kind)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

    def log_message(self, *args: typing.Any) -> None:
        pass


class _ServerTest(unittest.TestCase):
    def setUp(self) -> None:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        _Server.hits = []
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self.client = Client(self.url, "k", max_retries=1)
        self.addCleanup(self.client.close)

    def answer(self, fn: typing.Callable[[str], Answer]) -> None:
        _Server.next = staticmethod(fn)  # type: ignore[assignment]

    def calls(self) -> typing.Dict[str, typing.Callable[[], typing.Any]]:
        """Methods of each kind: a session, a page, another object, and the helpers built on them."""
        c = self.client
        return {
            "get_session": lambda: c.get_session("ses_x"),
            "create_session": lambda: c.create_session({"input": "x"}),
            "list_sessions": lambda: c.list_sessions(),
            "list_events": lambda: c.list_events("ses_x"),
            "delete_session": lambda: c.delete_session("ses_x"),
            "list_tools": lambda: c.list_tools(),
            "list_all": lambda: next(iter(c.list_all())),
            "wait_for": lambda: c.wait_for("ses_x", timeout_s=5),
        }

    def async_calls(self) -> typing.Dict[str, typing.Callable[[AsyncClient], typing.Awaitable[typing.Any]]]:
        async def first(c: AsyncClient) -> typing.Any:
            async for s in c.list_all():
                return s

        return {
            "get_session": lambda c: c.get_session("ses_x"),
            "create_session": lambda c: c.create_session({"input": "x"}),
            "list_sessions": lambda c: c.list_sessions(),
            "delete_session": lambda c: c.delete_session("ses_x"),
            "list_all": first,
            "wait_for": lambda c: c.wait_for("ses_x", timeout_s=5),
        }

    def assert_not_the_api(self, what: str, cause: typing.Optional[type] = None) -> None:
        for name, call in self.calls().items():
            with self.subTest(f"{name}: {what}"):
                with self.assertRaises(ConnectionError) as err:
                    call()
                if cause is not None:
                    self.assertIsInstance(err.exception.__cause__, cause)

        async def run_async() -> None:
            async with AsyncClient(self.url, "k", max_retries=1) as c:
                for name, call in self.async_calls().items():
                    with self.subTest(f"async {name}: {what}"):
                        with self.assertRaises(ConnectionError):
                            await call(c)

        asyncio.run(run_async())


class NotJsonTest(_ServerTest):
    def test_a_non_json_2xx_is_a_connection_error(self) -> None:
        self.answer(lambda path: answer(HTML, "text/html"))
        self.assert_not_the_api("an HTML page")
        self.answer(lambda path: answer(HTML))
        self.assert_not_the_api("an HTML page said to be JSON", ValueError)
        self.answer(lambda path: answer(SESSION[:20]))
        self.assert_not_the_api("a truncated JSON body", ValueError)

    def test_json_of_another_type_or_shape_is_a_connection_error(self) -> None:
        self.answer(lambda path: answer(SESSION, "text/plain"))
        self.assert_not_the_api("JSON sent as text/plain")
        for body in (b"[]", b'"ok"', b"null", b"42"):
            self.answer(lambda path, body=body: answer(body))  # type: ignore[misc]
            self.assert_not_the_api(f"{body!r}, not an object")
        # An object, but not what list_all and wait_for read (a KeyError before).
        self.answer(lambda path: answer(b'{"hello": "world"}'))
        with self.assertRaises(ConnectionError):
            next(iter(self.client.list_all()))
        with self.assertRaises(ConnectionError):
            self.client.wait_for("ses_x", timeout_s=5)

    def test_the_api_answers_still_pass(self) -> None:
        # 204 and an empty 2xx are None, as before; JSON without a content type is read by its body.
        self.answer(lambda path: answer(b"", None, 204))
        self.assertIsNone(self.client.delete_session("ses_x"))
        self.answer(lambda path: answer(b""))
        self.assertIsNone(self.client.delete_session("ses_x"))
        self.answer(lambda path: answer(SESSION, None))
        self.assertEqual(self.client.get_session("ses_x")["id"], "ses_x")
        self.answer(lambda path: answer(SESSION, "application/json; charset=utf-8"))
        running = self.client.wait_for("ses_x", timeout_s=5, statuses=frozenset({"running"}))
        self.assertEqual(running["status"], "running")
        page = b'{"data": [{"id": "ses_a"}], "next_cursor": null, "has_more": false}'
        self.answer(lambda path: answer(page))
        self.assertEqual([s["id"] for s in self.client.list_all()], ["ses_a"])
        # An error answer that is not JSON is still the ApiError of its status.
        self.answer(lambda path: answer(HTML, "text/html", 404))
        with self.assertRaises(ApiError) as err:
            self.client.get_session("ses_x")
        self.assertEqual((err.exception.status, err.exception.code), (404, "http_error"))


class RetryAfterTest(_ServerTest):
    def test_retry_after_parsing(self) -> None:
        def parsed(value: str) -> typing.Optional[float]:
            return error_from_response(429, None, {"retry-after": value}).retry_after

        for junk in ("-5", "NaN", "nan", "inf", "-inf", "1e400", "1_0", "0x10", "soon", "", " "):
            self.assertIsNone(parsed(junk), junk)
        self.assertEqual(parsed("3"), 3.0)
        self.assertEqual(parsed(" 2.5 "), 2.5)
        ahead = parsed(email.utils.formatdate(time.time() + 30, usegmt=True))
        self.assertTrue(ahead is not None and 28 <= ahead <= 31, ahead)
        self.assertEqual(parsed("Sun, 06 Nov 1994 08:49:37 GMT"), 0.0)

    def test_a_retry_after_that_is_no_delay_is_backed_off_from(self) -> None:
        for value in ("-5", "NaN", "inf", "soon"):
            with self.subTest(value):
                _Server.hits = []
                self.answer(
                    lambda path, value=value: answer(RATE_LIMITED, status=429, retry_after=value)  # type: ignore[misc]
                    if len(_Server.hits) == 1
                    else answer(SESSION)
                )
                self.assertEqual(self.client.get_session("ses_x")["id"], "ses_x")
                self.assertEqual(len(_Server.hits), 2)
                waited = _Server.hits[1][1] - _Server.hits[0][1]
                # The client's own first backoff: 0.5 s with jitter (0.375 to 0.625 s).
                self.assertTrue(0.3 <= waited <= 2, f"Retry-After: {value} waited {waited:.3f} s")

                async def run_async() -> typing.Any:
                    async with AsyncClient(self.url, "k", max_retries=1) as c:
                        return await c.get_session("ses_x")

                _Server.hits = []
                self.assertEqual(asyncio.run(run_async())["id"], "ses_x")
                self.assertEqual(len(_Server.hits), 2)


def _sse(*records: str) -> Answer:
    return answer("".join(records).encode(), "text/event-stream")


EVENT = 'id: 1-0\ndata: {"id": "1-0", "session_id": "ses_x", "type": "session.status", "data": {}}\n\n'


class FollowTest(_ServerTest):
    def _follow(self, **kw: typing.Any) -> typing.List[str]:
        seen: typing.List[str] = []
        for event in self.client.follow("ses_x", **kw):
            seen.append(event["id"])
        return seen

    def _follow_async(self, **kw: typing.Any) -> typing.List[str]:
        async def run() -> typing.List[str]:
            seen: typing.List[str] = []
            async with AsyncClient(self.url, "k") as c:
                async for event in c.follow("ses_x", **kw):
                    seen.append(event["id"])
            return seen

        return asyncio.run(run())

    def test_a_record_that_is_not_the_apis_ends_follow_with_a_connection_error(self) -> None:
        bad = {
            "data not JSON": "id: 2-0\ndata: <html>oops</html>\n\n",
            "data cut short": 'id: 2-0\ndata: {"id": "2-0", "sess\n\n',
            "data not an object": "id: 2-0\ndata: [1, 2]\n\n",
            "an id that is no event id": 'id: abc\ndata: {"id": "abc"}\n\n',
            "an error record not JSON": "event: error\ndata: <html>\n\n",
        }
        for what, record in bad.items():
            for follow in (self._follow, self._follow_async):
                with self.subTest(f"{what} ({follow.__name__})"):
                    _Server.hits = []
                    self.answer(lambda path, record=record: _sse(EVENT, record))  # type: ignore[misc]
                    with self.assertRaises(ConnectionError) as err:
                        follow(max_reconnects=2)
                    self.assertNotIn("reconnections", str(err.exception), "not the API: not reconnected")
                    self.assertEqual(len(_Server.hits), 1)

    def test_a_stream_answered_with_a_page_is_a_connection_error_at_once(self) -> None:
        for kind, body in (("text/html", HTML), ("application/json", SESSION)):
            for follow in (self._follow, self._follow_async):
                with self.subTest(f"{kind} ({follow.__name__})"):
                    _Server.hits = []
                    self.answer(lambda path, kind=kind, body=body: answer(body, kind))  # type: ignore[misc]
                    with self.assertRaises(ConnectionError) as err:
                        follow(max_reconnects=2)
                    self.assertNotIn("reconnections", str(err.exception))
                    self.assertEqual(len(_Server.hits), 1, "not the API: not reconnected")

    def test_the_apis_stream_still_passes(self) -> None:
        deleted = 'id: 2-0\ndata: {"id": "2-0", "session_id": "ses_x", "type": "session.deleted", "data": {}}\n\n'
        self.answer(lambda path: _sse(": ping\n\n", EVENT, deleted))
        self.assertEqual(self._follow(), ["1-0", "2-0"])
        self.assertEqual(self._follow_async(), ["1-0", "2-0"])


if __name__ == "__main__":
    unittest.main()
