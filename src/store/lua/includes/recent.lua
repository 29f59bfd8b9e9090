-- recent: what a session's writes keep a short memory of, each in a meta field holding a JSON array of entries,
-- newest first, the newest `keep` kept:
-- - `chat_posted`: the chat's user messages a session was given lately (POST /v1/chat, src/chat/request.ts), so the
--   same request sent again (a retry after a crash, to any replica) posts nothing twice. Entries `{id, fp, after,
--   rev, idle}`: the UIMessage id, the fingerprint of what was posted, the event cursor its answer streamed from,
--   the revision of the post, and whether the post left the session not running (its answer was the status).
-- - `idem_applied`: the Idempotency-Key tokens of the keyed requests that changed the session lately
--   (src/store/idempotency.ts `appliedToken`), recorded by the change itself, so a retry of one whose answer was
--   never kept (its process killed between the change and the record; its key freed when the lease lapsed) finds it
--   done and does not apply it again. Entries `{t, q, after?, message?}`: the token, whether the change queued work
--   (a 202), and for a chat regenerate the event cursor its answer streams from and the message it names.
-- Use: recent_find(meta, field, key, value) -> the JSON text of the entry whose `key` is `value`, or nil;
-- recent_add(meta, field, entry, keep) records `entry` (a table), keeping the newest `keep`.
local function recent_list(meta, field)
  local text = redis.call('HGET', meta, field)
  if not text or text == '' then return {} end
  return cjson.decode(text)
end
local function recent_find(meta, field, key, value)
  for _, e in ipairs(recent_list(meta, field)) do
    if e[key] == value then return cjson.encode(e) end
  end
  return nil
end
local function recent_add(meta, field, entry, keep)
  local list = recent_list(meta, field)
  table.insert(list, 1, entry)
  while #list > keep do table.remove(list) end
  redis.call('HSET', meta, field, cjson.encode(list))
end
