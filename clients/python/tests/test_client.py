"""The Python client against a running service (started by test/python-client.test.ts).

Environment: TRS_BASE_URL, TRS_API_KEY, TRS_OTHER_KEY (another tenant's key), TRS_OPENAPI (path of openapi.json).
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
import typing
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from toolrunner_sessions import (  # noqa: E402
    ApiError,
    AsyncClient,
    Client,
    WebhookVerificationError,
    event_id_key,
    verify_webhook,
)
from toolrunner_sessions import types as t  # noqa: E402

BASE = os.environ["TRS_BASE_URL"]
KEY = os.environ["TRS_API_KEY"]
OTHER = os.environ["TRS_OTHER_KEY"]
WEATHER = {"input": "What is the weather in Paris?", "tools": ["get_weather"]}


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
