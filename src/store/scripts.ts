/**
 * Lua scripts, registered with ioredis `defineCommand`. Each one touches only keys of one session (one hash tag),
 * so it runs unchanged on a Redis Cluster.
 */

/**
 * The pub/sub notice of the events a script wrote, shared by the scripts that write events (spliced into them).
 * When the events are small enough and contain no raw line break (JSON text never does), the notice carries them,
 * with the id of the entry before the first one (`prev`), so a relay whose cursor is `prev` fans them out without
 * reading the log; otherwise (or without a reader at `prev`) it carries only the newest id and relays read the log.
 * Format (lines): `E`, prev, newest, then per event: id, type, at (ms), revision (0: none), data. See
 * src/events/notice.ts.
 */
const NOTICE = `
local notice_parts = {}
local notice_size = 0
local notice_prev = false
local notice_last = false
local function notice_before(key)
  if notice_prev then return end
  local row = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  notice_prev = row and row[1] or '0-0'
end
local function notice_add(max, id, t, at, rev, data)
  notice_last = id
  if not notice_parts then return end
  notice_size = notice_size + #data + #t + 64
  if notice_size > max or string.find(data, '\\n', 1, true) then
    notice_parts = false
  else
    notice_parts[#notice_parts + 1] = id .. '\\n' .. t .. '\\n' .. at .. '\\n' .. rev .. '\\n' .. data
  end
end
local function notice_publish(channel)
  if not notice_last then return end
  if notice_parts then
    redis.call('PUBLISH', channel, 'E\\n' .. notice_prev .. '\\n' .. notice_last .. '\\n' .. table.concat(notice_parts, '\\n'))
  else
    redis.call('PUBLISH', channel, notice_last)
  end
end
`;

/**
 * append_events — the live stream events of a turn, appended to the session's log, and their notice.
 * KEYS[1] events
 * ARGV[1] pub/sub channel  ARGV[2] MAXLEN (approximate trim)  ARGV[3] `at` (ms)  ARGV[4] notice size limit (bytes)
 * ARGV[5..] type, data, type, data, …
 * Returns the id of the last event written.
 */
export const APPEND_EVENTS = `
${NOTICE}
notice_before(KEYS[1])
local max = tonumber(ARGV[4])
for i = 5, #ARGV, 2 do
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 't', ARGV[i], 'd', ARGV[i + 1], 'at', ARGV[3])
  notice_add(max, id, ARGV[i], ARGV[3], '0', ARGV[i + 1])
end
notice_publish(ARGV[1])
return notice_last
`;

/**
 * apply — one atomic, guarded change to a session: history, iteration records, fields, queue and events together.
 *
 * KEYS[1] meta  KEYS[2] msgs  KEYS[3] iters  KEYS[4] queue  KEYS[5] events  KEYS[6] lease
 * ARGV[1] guard JSON `{fence?, rev?, status?: string[]}`: the change happens only if all hold
 * ARGV[2] ops JSON (ApplyOps in store.ts). With `queue`, the queued follow-ups are popped and merged, behind
 *         `queue.base` if given, into one new user message (or, with `queue.into_last`, onto the blocks of the
 *         last message, a user turn); then `queue.any` or `queue.none` is applied.
 * ARGV[3] event log MAXLEN (approximate trim)
 * ARGV[4] pub/sub channel of the notice of the events written (NOTICE), so live readers wake up
 * ARGV[5] notice size limit (bytes)
 * Returns `{revision, merged_count, merged_message_json, control, params_rev}` (the last two as they stand after
 * the change, so a runner learns of a cancel or a PATCH at its next commit even if it missed the pub/sub message), or `{'ERR', code, current}` with code
 * `not_found` | `exists` | `fenced` | `revision` | `status` and nothing written.
 */
export const APPLY = `
${NOTICE}
local meta = KEYS[1]
local guard = cjson.decode(ARGV[1])
if guard.create then
  if redis.call('EXISTS', meta) == 1 then return {'ERR', 'exists', ''} end
elseif redis.call('EXISTS', meta) == 0 then
  return {'ERR', 'not_found', ''}
end
local cur = redis.call('HMGET', meta, 'fence', 'revision', 'status')
if guard.fence and tonumber(cur[1]) ~= guard.fence then return {'ERR', 'fenced', tostring(cur[1])} end
if guard.rev and tonumber(cur[2]) ~= guard.rev then return {'ERR', 'revision', tostring(cur[2])} end
if guard.status then
  local ok = false
  for _, s in ipairs(guard.status) do if s == cur[3] then ok = true end end
  if not ok then return {'ERR', 'status', tostring(cur[3])} end
end

local ops = cjson.decode(ARGV[2])
local rev = redis.call('HINCRBY', meta, 'revision', 1)
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))

local notice_max = tonumber(ARGV[5])
local function emit(ev)
  local data = ev[2]
  -- A third element asks for the new revision in the data, which only the script knows.
  if ev[3] then data = (string.gsub(data, '"revision":null', '"revision":' .. rev, 1)) end
  notice_before(KEYS[5])
  local id = redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[3], '*', 't', ev[1], 'd', data, 'r', rev, 'at', now)
  notice_add(notice_max, id, ev[1], now, rev, data)
end

local function pushAll(key, list)
  for i = 1, #list, 1000 do
    redis.call('RPUSH', key, unpack(list, i, math.min(i + 999, #list)))
  end
end

local function run(o)
  if not o then return end
  if o.trim_msgs then redis.call('LTRIM', KEYS[2], 0, o.trim_msgs - 1) end
  if o.lset_msgs then for _, p in ipairs(o.lset_msgs) do redis.call('LSET', KEYS[2], p[1], p[2]) end end
  if o.push_msgs then pushAll(KEYS[2], o.push_msgs) end
  if o.trim_iters then redis.call('LTRIM', KEYS[3], 0, o.trim_iters - 1) end
  if o.lset_iters then for _, p in ipairs(o.lset_iters) do redis.call('LSET', KEYS[3], p[1], p[2]) end end
  if o.push_iters then pushAll(KEYS[3], o.push_iters) end
  if o.hset then
    local args = {}
    for k, v in pairs(o.hset) do args[#args + 1] = k; args[#args + 1] = v end
    if #args > 0 then redis.call('HSET', meta, unpack(args)) end
  end
  if o.hdel and #o.hdel > 0 then redis.call('HDEL', meta, unpack(o.hdel)) end
  if o.hincr then for k, v in pairs(o.hincr) do redis.call('HINCRBY', meta, k, v) end end
  if o.queue_push then pushAll(KEYS[4], o.queue_push) end
  if o.drop_queue then redis.call('DEL', KEYS[4]) end
  if o.release_lease then redis.call('DEL', KEYS[6]) end
  if o.events then for _, ev in ipairs(o.events) do emit(ev) end end
end

run(ops)
local merged_count = 0
local merged = ''
if ops.queue then
  local entries = redis.call('LRANGE', KEYS[4], 0, -1)
  merged_count = #entries
  local parts = {}
  if ops.queue.base then parts[1] = ops.queue.base end
  for _, e in ipairs(entries) do parts[#parts + 1] = e end
  if ops.queue.into_last and merged_count > 0 then
    -- User turns are stored with array content, so the last one ends in ']}' and blocks append by concatenation.
    local last = redis.call('LINDEX', KEYS[2], -1)
    merged = string.sub(last, 1, -3) .. ',' .. table.concat(parts, ',') .. ']}'
    redis.call('LSET', KEYS[2], -1, merged)
  elseif #parts > 0 and not ops.queue.into_last then
    merged = '{"role":"user","content":[' .. table.concat(parts, ',') .. ']}'
    redis.call('RPUSH', KEYS[2], merged)
  end
  if merged_count > 0 then
    redis.call('DEL', KEYS[4])
    emit({'message.appended', merged})
    run(ops.queue.any)
  else
    run(ops.queue.none)
  end
end
redis.call('HSET', meta, 'updated_at', now, 'msg_count', redis.call('LLEN', KEYS[2]))
notice_publish(ARGV[4])
local after = redis.call('HMGET', meta, 'control', 'params_rev')
return {rev, merged_count, merged, after[1] or '', after[2] or '0'}
`;

/**
 * acquire — take the run lease of a running session.
 * KEYS[1] meta  KEYS[2] lease
 * ARGV[1] owner id  ARGV[2] ttl ms
 * Returns the new fencing token (the session's `fence` field, incremented), or 0 when the lease is held by
 * someone else or the session is not `running`.
 */
export const ACQUIRE = `
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
`;

/**
 * renew — extend the lease if it is still ours.
 * KEYS[1] lease  ARGV[1] `<owner>:<fence>`  ARGV[2] ttl ms
 * Returns 1 if renewed, 0 if the lease is gone or another's.
 */
export const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`;

/**
 * release — drop the lease if it is still ours.
 * KEYS[1] lease  ARGV[1] `<owner>:<fence>`
 * Returns 1 if released.
 */
export const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/**
 * destroy — delete every key of a session but the event log, which keeps only a `session.deleted` event and
 * expires after ARGV[2] ms so live readers learn of the deletion.
 * KEYS[1] meta  KEYS[2] msgs  KEYS[3] iters  KEYS[4] queue  KEYS[5] events  KEYS[6] lease
 * ARGV[1] event data JSON  ARGV[2] ttl of the event log ms  ARGV[3] event notification channel
 * Returns 1, or 0 if the session did not exist.
 */
export const DESTROY = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local rev = redis.call('HINCRBY', KEYS[1], 'revision', 1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6])
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local id = redis.call('XADD', KEYS[5], '*', 't', 'session.deleted', 'd', ARGV[1], 'r', rev, 'at', now)
redis.call('PEXPIRE', KEYS[5], ARGV[2])
redis.call('PUBLISH', ARGV[3], id)
return 1
`;
