"""The Python client against a running service (started by test/python-client.test.ts).

Environment: TRS_BASE_URL, TRS_API_KEY, TRS_OTHER_KEY (another tenant's key), TRS_OPENAPI (path of openapi.json).
The service sends its SSE heartbeat every 200 ms (STREAM_HEARTBEAT_MS), so a wait sees many of them.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.server
import json
import os
import queue
import sys
import threading
import time
import re
import typing
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from toolrunner_sessions import (  # noqa: E402
    ApiError,
    AsyncClient,
    Client,
    InvalidArgumentError,
    ServiceError,
    WaitTimeoutError,
    WebhookVerificationError,
    event_id_key,
    verify_webhook,
)
from toolrunner_sessions import types as t  # noqa: E402
from toolrunner_sessions._base import Request, Routes  # noqa: E402

BASE = os.environ["TRS_BASE_URL"]
KEY = os.environ["TRS_API_KEY"]
OTHER = os.environ["TRS_OTHER_KEY"]
WEATHER = {"input": "What is the weather in Paris?", "tools": ["get_weather"]}
TERMINAL = frozenset({"idle", "failed"})


def _in_thread(fn: typing.Callable[[], typing.Any], limit_s: float) -> typing.Tuple[str, typing.Any, float]:
    """Runs ``fn`` in a daemon thread: ("returned", value, s) or ("raised", exception, s), or ("hung", None, limit_s)
    when it has not ended within ``limit_s`` (a wait that ignores its deadline must fail the test, not hang it)."""
    out: "queue.Queue[typing.Tuple[str, typing.Any, float]]" = queue.Queue()
    start = time.monotonic()

    def run() -> None:
        try:
            value = fn()
            out.put(("returned", value, time.monotonic() - start))
        except BaseException as err:  # noqa: B902 - handed to the test as it is
            out.put(("raised", err, time.monotonic() - start))

    threading.Thread(target=run, daemon=True).start()
    try:
        return out.get(timeout=limit_s)
    except queue.Empty:
        return ("hung", None, limit_s)


class SessionsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(BASE, KEY)
        self.addCleanup(self.client.close)

    def test_a_session_runs_to_its_answer(self) -> None:
        session = self.client.create_session(WEATHER)
        self.assertEqual(session["object"], "session")
        done = self.client.wait_for(session["id"], statuses=frozenset({"idle", "failed"}))
        self.assertEqual(done["status"], "idle")
        self.assertEqual(done["stop_reason"], "end_turn")
        history = self.client.get_messages(session["id"])["data"]
        kinds = [b["type"] for m in history for b in (m["content"] if isinstance(m["content"], list) else [])]
        self.assertIn("tool_use", kinds)
        self.assertIn("tool_result", kinds)
        iterations = self.client.list_iterations(session["id"])["data"]
        self.assertEqual(len(iterations), done["iteration"])

    def test_an_approval_round_trip(self) -> None:
        session = self.client.create_session({**WEATHER, "approval": "always"})
        waiting = self.client.wait_for(session["id"])
        self.assertEqual(waiting["status"], "requires_action")
        action = waiting["required_action"]
        self.assertEqual(action["type"], "approve_tool_calls")
        for call in action["tool_calls"]:
            self.client.approve(session["id"], call["id"])
        done = self.client.wait_for(session["id"], statuses=frozenset({"idle", "failed"}))
        self.assertEqual(done["status"], "idle")

    def test_errors_carry_the_code(self) -> None:
        with self.assertRaises(ApiError) as missing:
            self.client.get_session("ses_doesnotexist0000")
        self.assertEqual((missing.exception.status, missing.exception.code), (404, "session_not_found"))
        with self.assertRaises(ApiError) as bad:
            self.client.create_session({"input": "x", "max_iterations": "many"})
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "invalid_request"))
        self.assertIsNotNone(bad.exception.details)
        session = self.client.create_session({**WEATHER, "start": False})
        with self.assertRaises(ApiError) as stale:
            self.client.update_session(session["id"], {"max_iterations": 3}, if_match=session["revision"] + 5)
        self.assertEqual((stale.exception.status, stale.exception.code), (412, "revision_mismatch"))
        updated = self.client.update_session(session["id"], {"max_iterations": 3}, if_match=session["revision"])
        self.assertEqual(updated["max_iterations"], 3)

    def test_another_tenant_sees_nothing(self) -> None:
        session = self.client.create_session({**WEATHER, "start": False})
        with Client(BASE, OTHER) as other:
            with self.assertRaises(ApiError) as err:
                other.get_session(session["id"])
            self.assertEqual(err.exception.code, "session_not_found")
            self.assertNotIn(session["id"], [s["id"] for s in other.list_all()])

    def test_list_all_pages_through_every_session(self) -> None:
        made = [self.client.create_session({**WEATHER, "start": False})["id"] for _ in range(3)]
        seen = [s["id"] for s in self.client.list_all(limit=1)]
        self.assertEqual(len(seen), len(set(seen)), "no session twice")
        for sid in made:
            self.assertIn(sid, seen)
        self.assertEqual(seen[:3], list(reversed(made)), "newest first")

    def test_idempotency_key_returns_the_first_answer(self) -> None:
        first = self.client.create_session({**WEATHER, "start": False}, idempotency_key="py-idem-1")
        again = self.client.create_session({**WEATHER, "start": False}, idempotency_key="py-idem-1")
        self.assertEqual(first["id"], again["id"])


class WaitForTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(BASE, KEY)
        self.addCleanup(self.client.close)

    def _second_run_waiting(self) -> t.Session:
        """A session whose first run ended idle and whose second run waits for an approval: its log holds an old
        ``idle`` status event, and its status now is not one."""
        session = self.client.create_session({**WEATHER, "approval": "always"})
        waiting = self.client.wait_for(session["id"])
        self.assertEqual(waiting["status"], "requires_action")
        for call in waiting["required_action"]["tool_calls"]:
            self.client.approve(session["id"], call["id"])
        self.assertEqual(self.client.wait_for(session["id"], statuses=TERMINAL)["status"], "idle")
        self.client.send_message(session["id"], "And the weather in Tokyo?")
        again = self.client.wait_for(session["id"], statuses=frozenset({"requires_action"}))
        self.assertEqual(again["status"], "requires_action")
        return again

    def test_wait_for_returns_only_a_status_asked_for(self) -> None:
        waiting = self._second_run_waiting()
        # The replayed idle event of the first run is older than the session: no answer from it.
        outcome, value, _ = _in_thread(lambda: self.client.wait_for(waiting["id"], timeout_s=1.5, statuses=TERMINAL), 20)
        self.assertEqual(outcome, "raised", value["status"] if outcome == "returned" else "still waiting after 20 s")
        self.assertIsInstance(value, TimeoutError)
        for call in waiting["required_action"]["tool_calls"]:
            self.client.approve(waiting["id"], call["id"])
        done = self.client.wait_for(waiting["id"], statuses=TERMINAL)
        self.assertEqual(done["status"], "idle")
        self.assertGreater(done["revision"], waiting["revision"])

    def test_wait_for_keeps_its_deadline_through_heartbeats(self) -> None:
        session = self.client.create_session({**WEATHER, "approval": "always"})
        self.assertEqual(self.client.wait_for(session["id"])["status"], "requires_action")
        outcome, value, took = _in_thread(lambda: self.client.wait_for(session["id"], timeout_s=2, statuses=TERMINAL), 20)
        self.assertEqual(outcome, "raised", "still waiting 20 s after a 2 s deadline" if outcome == "hung" else value)
        self.assertIsInstance(value, TimeoutError)
        # The package's own, as every exception it raises: a ServiceError too.
        self.assertIsInstance(value, WaitTimeoutError)
        self.assertIsInstance(value, ServiceError)
        self.assertGreaterEqual(took, 2)
        self.assertLess(took, 4, "returned within the deadline and its slack")

    def test_async_wait_for(self) -> None:
        async def main() -> None:
            async with AsyncClient(BASE, KEY) as client:
                session = await client.create_session({**WEATHER, "approval": "always"})
                waiting = await client.wait_for(session["id"])
                self.assertEqual(waiting["status"], "requires_action")
                with self.assertRaises(TimeoutError):
                    await client.wait_for(session["id"], timeout_s=1, statuses=TERMINAL)
                for call in waiting["required_action"]["tool_calls"]:
                    await client.approve(session["id"], call["id"])
                done = await client.wait_for(session["id"], statuses=TERMINAL)
                self.assertEqual(done["status"], "idle")
                await client.send_message(session["id"], "And the weather in Tokyo?")
                again = await client.wait_for(session["id"], statuses=frozenset({"requires_action"}))
                self.assertEqual(again["status"], "requires_action")
                with self.assertRaises(TimeoutError):
                    await client.wait_for(session["id"], timeout_s=1, statuses=TERMINAL)

        asyncio.run(main())


class _FaultyProxy(http.server.BaseHTTPRequestHandler):
    """Answers the next ``faults`` requests with their status and an empty body, and forwards the others to BASE."""

    faults: "typing.List[int]" = []
    hits: "typing.List[str]" = []

    def _handle(self) -> None:
        self.hits.append(f"{self.command} {self.path}")
        if self.faults:
            self.send_response(self.faults.pop(0))
            self.send_header("content-length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("content-length", "0"))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        req = urllib.request.Request(BASE + self.path, self.rfile.read(length) if length else None, headers, method=self.command)
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                status, body, kind = res.status, res.read(), res.headers.get("content-type", "")
        except urllib.error.HTTPError as err:
            status, body, kind = err.code, err.read(), err.headers.get("content-type", "")
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

    def log_message(self, *args: typing.Any) -> None:
        pass


class EmptyErrorTest(unittest.TestCase):
    """A 502/504 without a body (a proxy's) is an error: retried when the request may be repeated, never None."""

    def setUp(self) -> None:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FaultyProxy)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        _FaultyProxy.faults, _FaultyProxy.hits = [], []
        self.client = Client(f"http://127.0.0.1:{server.server_address[1]}", KEY, max_retries=2)
        self.addCleanup(self.client.close)
        with Client(BASE, KEY) as direct:
            self.session = direct.create_session({**WEATHER, "start": False})

    def test_a_get_is_retried_past_empty_502_and_504(self) -> None:
        _FaultyProxy.faults[:] = [502, 504]
        got = self.client.get_session(self.session["id"])
        self.assertEqual(got["id"], self.session["id"])
        self.assertEqual(len(_FaultyProxy.hits), 3)

    def test_empty_errors_past_the_retries_raise(self) -> None:
        _FaultyProxy.faults[:] = [502, 502, 502]
        with self.assertRaises(ApiError) as err:
            self.client.get_session(self.session["id"])
        self.assertEqual((err.exception.status, err.exception.code), (502, "http_error"))
        self.assertEqual(len(_FaultyProxy.hits), 3)

    def test_a_mutation_sent_once_raises_on_an_empty_error(self) -> None:
        _FaultyProxy.faults[:] = [502]
        with self.assertRaises(ApiError) as err:
            self.client.delete_session(self.session["id"])
        self.assertEqual(err.exception.status, 502)
        self.assertEqual(len(_FaultyProxy.hits), 1, "a DELETE is not repeated")
        _FaultyProxy.faults[:] = [504]
        made = self.client.create_session({**WEATHER, "start": False}, idempotency_key=f"py-504-{self.session['id']}")
        self.assertEqual(made["object"], "session", "a POST with an Idempotency-Key is retried")
        self.assertEqual(len(_FaultyProxy.hits), 3)


class AsyncTest(unittest.TestCase):
    def test_async_client_follows_a_run_to_its_end(self) -> None:
        async def main() -> typing.List[str]:
            async with AsyncClient(BASE, KEY) as client:
                session = await client.create_session(WEATHER)
                types: typing.List[str] = []
                async for event in client.follow(session["id"]):
                    types.append(event["type"])
                    if event["type"] == "session.status" and event["data"]["status"] in ("idle", "failed"):
                        break
                final = await client.get_session(session["id"])
                self.assertEqual(final["status"], "idle")
                return types

        types = asyncio.run(main())
        self.assertEqual(types[0], "session.created")
        for expected in ("turn.started", "turn.completed", "tool.started", "tool.completed"):
            self.assertIn(expected, types)


#: The /v1 routes without a method, and why: the AI SDK's chat transport answers UI message streams (for useChat),
#: and the WebSocket carries what follow() reads over SSE.
NOT_METHODS = {
    ("POST", "/v1/chat"),
    ("GET", "/v1/chat/{id}/stream"),
    ("GET", "/v1/sessions/{id}/stream"),
}


class _Recorder(Routes):
    def __init__(self) -> None:
        self.requests: typing.List[Request] = []

    def _call(self, request: Request) -> typing.Any:
        self.requests.append(request)
        return {}


def _placeholder(annotation: str) -> typing.Any:
    if annotation == "int":
        return 1
    if annotation.startswith(("Mapping", "Dict")):
        return {}
    if annotation.startswith("List"):
        return []
    return "x"


class RoutesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(BASE, KEY)
        self.addCleanup(self.client.close)

    def test_every_json_route_of_the_document_has_a_method(self) -> None:
        import inspect

        with open(os.environ["TRS_OPENAPI"], encoding="utf-8") as f:
            paths = json.load(f)["paths"]
        wanted = {
            (method.upper(), path)
            for path, ops in paths.items()
            if path.startswith("/v1/")
            for method in ops
            if method in ("get", "post", "put", "patch", "delete")
        } - NOT_METHODS
        recorder = _Recorder()
        for name, fn in inspect.getmembers(Routes, inspect.isfunction):
            if name.startswith("_"):
                continue
            params = list(inspect.signature(fn).parameters.values())[1:]
            args = [_placeholder(str(p.annotation)) for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
            getattr(recorder, name)(*args)
        covered = set()
        for request in recorder.requests:
            for method, path in wanted:
                pattern = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(path)) + "$"
                if method == request.method and re.match(pattern, request.path):
                    covered.add((method, path))
        self.assertEqual(sorted(wanted - covered), [], "routes without a method")
        for request in recorder.requests:
            if request.method == "POST":
                self.assertFalse(request.retry, f"{request.path}: sent once without an Idempotency-Key")

    def test_every_mutation_takes_its_keys(self) -> None:
        import inspect

        with open(os.environ["TRS_OPENAPI"], encoding="utf-8") as f:
            paths = json.load(f)["paths"]
        recorder = _Recorder()
        for name, fn in inspect.getmembers(Routes, inspect.isfunction):
            if name.startswith("_") or name in ("approve", "deny"):
                continue
            sig = inspect.signature(fn)
            params = list(sig.parameters.values())[1:]
            args = [_placeholder(str(p.annotation)) for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
            kw = {k: v for k, v in (("if_match", 7), ("idempotency_key", "k")) if k in sig.parameters}
            getattr(recorder, name)(*args, **kw)
            request = recorder.requests[-1]
            template = next(
                p for p in paths if re.fullmatch(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(p)), request.path)
            )
            declared = {
                (x.get("name") or x.get("$ref", "").rsplit("/", 1)[-1]).lower()
                for x in paths[template][request.method.lower()].get("parameters", [])
            }
            self.assertEqual("if-match" in declared, "If-Match" in request.headers, f"{name}: If-Match")
            self.assertEqual("idempotencykey" in declared, "Idempotency-Key" in request.headers, f"{name}: Idempotency-Key")

    def test_tenant_tools_and_the_worker_protocol(self) -> None:
        tool = {
            "description": "Look up an order by its number.",
            "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
            "runner": {"type": "worker"},
        }
        made = self.client.put_tool("py_lookup_order", tool)
        self.addCleanup(self.client.delete_tool, "py_lookup_order")
        with self.assertRaises(ApiError) as stale:
            self.client.put_tool("py_lookup_order", tool, if_match=made["revision"] + 3)
        self.assertEqual(stale.exception.code, "revision_mismatch")
        self.assertEqual(self.client.get_tool("py_lookup_order")["runner"], {"type": "worker"})
        session = self.client.create_session({"input": "Look up order 7", "tools": ["py_lookup_order"]})
        tasks: typing.List[typing.Dict[str, typing.Any]] = []
        deadline = time.monotonic() + 30
        while not tasks and time.monotonic() < deadline:
            tasks = self.client.claim_tool_tasks(["py_lookup_order"], max=5, wait_ms=5000, worker_id="py")["tasks"]
        self.assertEqual([task["session_id"] for task in tasks], [session["id"]])
        task = tasks[0]
        self.assertIn("lease_expires_at", self.client.heartbeat_tool_task(task["id"]))
        key = f"py-result-{task['id']}"
        self.assertTrue(self.client.submit_tool_task_result(task["id"], "shipped", idempotency_key=key)["accepted"])
        again = self.client.submit_tool_task_result(task["id"], "shipped", idempotency_key=key)
        self.assertTrue(again["accepted"], "the same key answers as the first")
        with self.assertRaises(ApiError) as late:
            self.client.submit_tool_task_result(task["id"], "shipped")
        self.assertEqual(late.exception.code, "task_already_completed")
        done = self.client.wait_for(session["id"], statuses=TERMINAL)
        self.assertEqual(done["status"], "idle")
        self.assertEqual(self.client.list_children(session["id"])["data"], [])
        self.assertIn("py_lookup_order", [x["name"] for x in self.client.list_tools()["data"]])

    def test_history_tokens_usage_and_memory(self) -> None:
        session = self.client.create_session({**WEATHER, "start": False})
        with self.assertRaises(ApiError) as stale:
            self.client.replace_messages(session["id"], [{"role": "user", "content": "Hi"}], if_match=session["revision"] + 1)
        self.assertEqual(stale.exception.code, "revision_mismatch")
        replaced = self.client.replace_messages(session["id"], [{"role": "user", "content": "Hi"}], if_match=session["revision"])
        history = self.client.get_messages(replaced["id"])["data"]
        self.assertEqual([(m["role"], m["content"][0]["text"]) for m in history], [("user", "Hi")])
        self.assertIsInstance(self.client.list_chat_messages(session["id"]), list)
        token = self.client.create_client_token(session["id"], ["read"], ttl_s=60, subject="py", idempotency_key="py-ct-1")
        self.assertEqual(self.client.create_client_token(session["id"], ["read"], ttl_s=60, subject="py", idempotency_key="py-ct-1")["id"], token["id"])
        with Client(BASE, token["token"]) as browser:
            self.assertEqual(browser.get_session(session["id"])["id"], session["id"])
            self.assertTrue(self.client.delete_client_token(token["id"])["deleted"])
            with self.assertRaises(ApiError) as revoked:
                browser.get_session(session["id"])
            self.assertEqual(revoked.exception.status, 401)
        self.assertEqual(self.client.get_usage()["object"], "usage")
        self.assertIn("limits", self.client.list_memory())
        with self.assertRaises(ApiError) as missing:
            self.client.get_memory_file("notes/none.md")
        self.assertEqual(missing.exception.code, "file_not_found")
        with self.assertRaises(ApiError) as missing:
            self.client.delete_memory_file("none.md")
        self.assertEqual(missing.exception.code, "file_not_found")
        # A path never leaves the memory routes: "/" is escaped, and dot segments are refused before anything is sent.
        for traversal in ("../sessions/" + session["id"], "notes/../../sessions/" + session["id"], ".."):
            with self.assertRaises(ValueError) as refused:
                self.client.delete_memory_file(traversal)
            self.assertIsInstance(refused.exception, InvalidArgumentError)
            self.assertIsInstance(refused.exception, ServiceError)
        with self.assertRaises(ApiError) as missing:
            self.client.get_memory_file("notes/deeper/none.md")
        self.assertEqual(missing.exception.code, "file_not_found")
        self.assertEqual(self.client.get_session(session["id"])["id"], session["id"])
        with self.assertRaises(ApiError) as stale:
            self.client.delete_session(session["id"], if_match=replaced["revision"] + 1)
        self.assertEqual(stale.exception.code, "revision_mismatch")
        self.client.delete_session(session["id"], if_match=replaced["revision"])

    def test_schedules_mcp_servers_and_webhooks(self) -> None:
        body = {"cron": "0 3 * * *", "session": {**WEATHER}}
        schedule = self.client.create_schedule(body, idempotency_key="py-sch-1")
        self.assertEqual(self.client.create_schedule(body, idempotency_key="py-sch-1")["id"], schedule["id"])
        self.assertIn(schedule["id"], [s["id"] for s in self.client.list_schedules(limit=100)["data"]])
        paused = self.client.update_schedule(schedule["id"], {"paused": True}, if_match=schedule["revision"])
        self.assertTrue(self.client.get_schedule(schedule["id"])["paused"])
        self.assertEqual(self.client.list_schedule_runs(schedule["id"])["data"], [])
        self.assertIn("schedule.updated", [e["type"] for e in self.client.list_schedule_events(schedule["id"])["data"]])
        self.assertTrue(self.client.delete_schedule(schedule["id"], if_match=paused["revision"])["deleted"])

        server = self.client.put_mcp_server("py_crm", "http://127.0.0.1:9/mcp", headers={"x-api-key": "s3cret"})
        self.assertEqual(self.client.get_mcp_server("py_crm")["headers"], {"x-api-key": "[redacted]"})
        self.assertIn("py_crm", [s["name"] for s in self.client.list_mcp_servers()["data"]])
        with self.assertRaises(ApiError) as stale:
            self.client.delete_mcp_server("py_crm", if_match=server["revision"] + 1)
        self.assertEqual(stale.exception.code, "revision_mismatch")
        self.assertTrue(self.client.delete_mcp_server("py_crm", if_match=server["revision"])["deleted"])

        hook = self.client.create_webhook("http://127.0.0.1:9/hook", idempotency_key="py-wh-1")
        self.addCleanup(self.client.delete_webhook, hook["id"])
        self.assertEqual(self.client.get_webhook(hook["id"])["url"], "http://127.0.0.1:9/hook")
        updated = self.client.update_webhook(hook["id"], {"description": "py"}, if_match=hook["revision"])
        self.assertEqual(updated["description"], "py")
        self.assertEqual(self.client.test_webhook(hook["id"], idempotency_key="py-wh-test")["type"], "webhook.test")
        self.assertIsInstance(self.client.list_webhook_deliveries(hook["id"], limit=5)["data"], list)

    def test_session_actions_take_if_match_and_idempotency_key(self) -> None:
        session = self.client.create_session(WEATHER)
        done = self.client.wait_for(session["id"], statuses=TERMINAL)
        with self.assertRaises(ApiError) as stale:
            self.client.fork(session["id"], 1, if_match=done["revision"] + 1)
        self.assertEqual(stale.exception.code, "revision_mismatch")
        fork = self.client.fork(session["id"], 1, if_match=done["revision"], idempotency_key=f"py-fork-{session['id']}")
        again = self.client.fork(session["id"], 1, idempotency_key=f"py-fork-{session['id']}")
        self.assertEqual(fork["id"], again["id"])
        with self.assertRaises(ApiError) as stale:
            self.client.compact(session["id"], if_match=done["revision"] + 1)
        self.assertEqual(stale.exception.code, "revision_mismatch")


class _Receiver(http.server.BaseHTTPRequestHandler):
    inbox: "queue.Queue[typing.Tuple[bytes, typing.Dict[str, str]]]" = queue.Queue()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.inbox.put((body, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: typing.Any) -> None:
        pass


class WebhooksTest(unittest.TestCase):
    def test_a_real_delivery_verifies(self) -> None:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        client = Client(BASE, KEY)
        self.addCleanup(client.close)
        hook = client.create_webhook(f"http://127.0.0.1:{server.server_address[1]}/hook", ["session.status"])
        self.addCleanup(client.delete_webhook, hook["id"])
        session = client.create_session(WEATHER)
        events = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            body, headers = _Receiver.inbox.get(timeout=60)
            event = verify_webhook(hook["secret"], body, headers)
            if event["session_id"] != session["id"]:
                continue
            events.append(event)
            if event["data"]["status"] == "idle":
                break
        self.assertEqual(events[-1]["data"]["status"], "idle")
        ordered = sorted(events, key=lambda e: event_id_key(e["id"]))
        self.assertEqual([e["id"] for e in ordered], sorted({e["id"] for e in events}, key=event_id_key))
        with self.assertRaises(WebhookVerificationError):
            verify_webhook(hook["secret"], body + b" ", headers)

    def test_signature_rules(self) -> None:
        secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
        body, stamp = b'{"id":"1-0"}', str(int(time.time()))
        sig = base64.b64encode(hmac.new(b"k" * 24, f"msg_1.{stamp}.".encode() + body, hashlib.sha256).digest())
        headers = {"Webhook-Id": "msg_1", "Webhook-Timestamp": stamp, "Webhook-Signature": "v1," + sig.decode()}
        self.assertEqual(verify_webhook(secret, body, headers), {"id": "1-0"})
        old = {**headers, "Webhook-Timestamp": str(int(time.time()) - 3600)}
        self.assertRaises(WebhookVerificationError, verify_webhook, secret, body, old)


class TypesTest(unittest.TestCase):
    """The TypedDicts name only fields the OpenAPI document declares, so they cannot drift from the service."""

    def test_typed_dicts_match_the_document(self) -> None:
        with open(os.environ["TRS_OPENAPI"], encoding="utf-8") as f:
            schemas = json.load(f)["components"]["schemas"]
        pairs = {
            t.Session: "Session",
            t.Usage: "SessionUsage",
            t.RequiredAction: "RequiredAction",
            t.SessionError: "SessionError",
            t.Event: "Event",
            t.SessionList: "SessionList",
            t.EventPage: "EventPage",
        }

        def fields(schema: dict) -> set:
            # A oneOf (Event: one member per type): the fields every member declares.
            if "oneOf" in schema:
                members = [fields(schemas[m["$ref"].rsplit("/", 1)[-1]]) for m in schema["oneOf"]]
                return set.intersection(*members)
            return set(schema.get("properties", {}))

        for cls, name in pairs.items():
            declared = fields(schemas[name])
            extra = set(typing.get_type_hints(cls)) - declared
            self.assertFalse(extra, f"{cls.__name__} names fields {sorted(extra)} that {name} lacks")


if __name__ == "__main__":
    unittest.main()
