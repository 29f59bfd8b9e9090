-- applied: the Idempotency-Key tokens of the keyed requests that changed a session lately (src/store/idempotency.ts
-- `appliedToken`), recorded by the change itself, so a retry of one whose answer was never kept (its process killed
-- between the change and the record; its key freed when the lease lapsed) finds it done and does not apply it again.
-- The meta field `idem_applied` holds the newest entries first, a JSON array of `{t, q}`: the token, and whether the
-- change queued work (the answer was 202).
-- Use: applied_find(meta, token) -> the entry's JSON text, or nil; applied_add(meta, entry, keep) records `entry` (a
-- table), keeping the newest `keep`.
local function applied_list(meta)
  local text = redis.call('HGET', meta, 'idem_applied')
  if not text or text == '' then return {} end
  return cjson.decode(text)
end
local function applied_find(meta, token)
  for _, e in ipairs(applied_list(meta)) do
    if e.t == token then return cjson.encode(e) end
  end
  return nil
end
local function applied_add(meta, entry, keep)
  local list = applied_list(meta)
  table.insert(list, 1, entry)
  while #list > keep do table.remove(list) end
  redis.call('HSET', meta, 'idem_applied', cjson.encode(list))
end
