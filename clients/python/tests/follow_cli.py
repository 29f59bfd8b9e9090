"""Prints each event of a session as one JSON line, following over SSE until the run ends (status idle or failed).

Used by test/python-client.test.ts, which cuts the connection under it: the output must still hold every event
exactly once. Arguments: base_url api_key session_id.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from toolrunner_sessions import Client  # noqa: E402

base, key, session_id = sys.argv[1:4]
with Client(base, key) as client:
    for event in client.follow(session_id):
        print(json.dumps({"id": event["id"], "type": event["type"]}), flush=True)
        if event["type"] == "session.status" and event["data"]["status"] in ("idle", "failed"):
            break
