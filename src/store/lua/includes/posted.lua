-- posted: the chat's user messages a session was given lately (POST /v1/chat, src/chat/request.ts), so the same
-- request sent again (a retry after a crash, to any replica) posts nothing twice. The meta field `chat_posted` holds
-- the newest entries first, a JSON array of `{id, fp, after, rev, idle}`: the UIMessage id, the fingerprint of what
-- was posted, the event cursor its answer streamed from, the revision of the post, and whether the post left the
-- session not running (its answer was the status, not a run).
-- Use: posted_find(meta, id) -> the entry's JSON text, or nil; posted_add(meta, entry, keep) records `entry` (a
-- table), keeping the newest `keep`.
local function posted_list(meta)
  local text = redis.call('HGET', meta, 'chat_posted')
  if not text or text == '' then return {} end
  return cjson.decode(text)
end
local function posted_find(meta, id)
  for _, e in ipairs(posted_list(meta)) do
    if e.id == id then return cjson.encode(e) end
  end
  return nil
end
local function posted_add(meta, entry, keep)
  local list = posted_list(meta)
  table.insert(list, 1, entry)
  while #list > keep do table.remove(list) end
  redis.call('HSET', meta, 'chat_posted', cjson.encode(list))
end
