-- apply: one atomic, guarded change to a session: history, iteration records, fields, queue and events together.
-- KEYS[1] meta (hash)  KEYS[2] msgs (list)  KEYS[3] iters (list)  KEYS[4] queue (list)  KEYS[5] events (stream)
-- KEYS[6] lease (string)  KEYS[7] compacted (list: the segments a compaction summarized, one JSON each, oldest first)
-- KEYS[8] stage (list: a create's history pushed before this call in parts, one key per attempt; see `stage` below;
--         or, with `compact.staged`, the string of the segment the compaction keeps, appended in parts likewise)
-- ARGV[1] guard JSON `{create?, fence?, rev?, status?: string[], turn_max?, posted?}`: the change happens only if all
--         hold; `turn_max` (bytes) caps the user turn that queued follow-ups will form (see `queue_push` below);
--         `posted` `{id, fp, after, keep}`: the chat's user message this change posts, refused (`posted`) when the
--         session was given it lately, else recorded with the change (includes/recent.lua); `applied`
--         `{t, q, keep, after?, message?}`: the Idempotency-Key token of the request making this change, refused
--         (`applied`) when the session recorded it already, else recorded with the change (includes/recent.lua);
--         `results_max` (bytes): the step's tool results (its `result:*` fields) may not grow past it with this
--         change's `hset` (refused as `results_too_large`; one that leaves them as large or smaller passes);
--         `fields` `{name: value}`: each meta field holds that value ('' for a field not set), else refused as
--         `revision` (the state the writer read has changed); `room` (bytes; a client's write, see Storage below):
--         what its tenant may still store once this change's counted additions (`hincr.bytes`) are, refused as
--         `storage` when what it rewrites would grow by more
-- ARGV[2] ops JSON (ApplyOps in src/store/store.ts). `queue_push` and `queue.base` are block arrays as JSON text
--         (includes/blocks.lua). With `queue`, the queued follow-ups are popped and joined, behind `queue.base` if
--         given, into one new user turn (or, with `queue.into_last`, after the blocks of the last message, a user
--         turn); `queue.none` is applied when nothing was queued.
--         `queue.results` (instead of `queue.base`): the tool results turn, each entry `{id}` (the call's stored result,
--         meta field `result:<id>`) or `{id, block}`; `queue.cache_last` marks its last block
--         (includes/blocks.lua `blocks_results`). An `hset` that clears `pending` drops every `result:*`,
--         `reported:*` and `retried:*` field.
--         `compact` `{count, at_iteration, summary, sizes}` (applied first): the first `count` messages of the
--         history move, as they are, into a new segment `{"at_iteration":n,"messages":[…]}` pushed to KEYS[7], and
--         the summary message (JSON) takes their place; `msg_base` grows by `count`; the meta field `seg_bytes` keeps
--         the byte lengths of the newest `sizes` segments, which a chat page reads before it reads a segment
--         (src/store/store.ts historySnapshot): `<segments> <bytes>,<at_iteration>,<u|a> …`, the number of
--         segments kept when it was written, then one entry per segment, oldest first, the last for segment
--         `<segments>` - 1; `u` when its messages end with a user turn (`ends_with_user`), else `a`; the meta field
--         `seg_counts` keeps where each segment's messages are in the whole record (see `compact` below).
--         `compact.staged` `{key, bytes}`: the segment, too large for one script to build or push, was appended in
--         parts to KEYS[8] (whose name ends with `key`), `bytes` long (refused as `stage` when it is not): the
--         key is kept and the list gets a stub naming it (see `compact` below); meta `seg_keys` lists each such
--         `key`, space-separated.
--         `count_once` `[[field, {counter: n}]…]`: each entry's counters are added only if `field` was not set, and
--         it is set (a sub-agent's usage under `cb:<child id>`, the mark child-usage-1.lua sets too).
--         `stage` `{count}` (with `create`, instead of `push_msgs`): the history, too large for one script to decode
--         without stalling Redis (src/store/store.ts `stageHistory`), was pushed to KEYS[8] in parts, with an expiry;
--         it becomes the session's history by RENAME (refused as `stage` when KEYS[8] does not hold `count` messages).
--         `keep_revision` (top level, without `queue`): a change no client sees but by its events (the deadline's
--         warning `action.expiring`, src/sessions/deadlines.ts): `revision` and `updated_at` stay as they are (an
--         If-Match read before it still holds, the retention's clock does not start again) and its events carry no
--         revision (null, as those written outside a change). Such a change must not be guarded by `rev` alone, which
--         it does not move: `fields` guards it.
--         `spend_open` (top level; never with `keep_revision`): the turn this change bills (its `hincr.u_*`) is
--         still to be added to its tenant's day: `<revision>|` .. this value (`<day>|<counters>`, src/cost/spend.ts
--         OpenSpend), the new revision being the turn's seq there, is appended to the meta field `spend_open`, a
--         list of such entries joined by `;`, oldest first. `spend_recorded` (a number; absent: none): the seq
--         through which the run recorded the session's turns in their tenant's day; the entries at or below it
--         leave the list, the others stay (a turn whose record failed is kept until a record through it succeeds;
--         every seq committed stays in the list until then). Usually that leaves the new entry alone (the previous
--         one was recorded). At most SPEND_OPEN_MAX entries (src/cost/spend.ts, the same number): beyond it the
--         oldest is dropped, a bound on a field written per commit, reached only after 32 consecutive billed
--         turns whose records all failed. Not counted as Storage (a few dozen bytes each, one field per session).
--         `now` (ms; with `create`): the create's time, its `created_at`, which its answer and `session.created` give
--         as `updated_at` too (and `expires_at` from it): the write stamps it, not TIME, so a read of the session just
--         made answers what its create did. Any other change stamps `updated_at` with TIME, never below the one stored
--         (a create's time is the replica's reckoning of Redis's clock, which may run a few ms ahead).
-- ARGV[3] most events kept  ARGV[4] pub/sub channel of the notice of the events written (includes/notice.lua)
-- ARGV[5] notice size limit (bytes)  ARGV[6] most event bytes kept (includes/event-log.lua)
-- Storage (TENANT_MAX_BYTES, src/store/storage-quota.ts): the store counts what it sees a change add (its pushes,
-- queued follow-ups, events, summary; a create's fields whole) and passes it as `hincr.bytes`. What a change
-- rewrites only this script can weigh, and it counts it here, into the meta field `bytes` (which the session's delete
-- gives back, destroy-11.lua), as the new length less the old (negative: given back): each `hset` field but a
-- create's, each `lset_msgs`/`lset_iters` element; less the `result:*`/`reported:*` values a cleared step drops;
-- plus the blocks `queue.base` adds to the history (a step's results, moved from those fields or given) and the
-- data of the `message.appended` event written here. Lengths in bytes, as Lua's `#`.
-- Returns {revision, merged_count, appended, into_last, control, params_rev, grown}: `appended` is the array of
-- blocks added to the history ('' when none; `into_last` 1 when they joined the last turn, 0 for a new turn),
-- `control` and `params_rev` as they stand after the change, so a runner learns of a cancel or a PATCH at its next
-- commit even if it missed the pub/sub message; `grown` the bytes counted here (see Storage), which the store adds
-- to the tenant's count. Or {'ERR', code, current} with nothing written, code `not_found` |
-- `exists` | `fenced` | `revision` | `status` | `stage` | `turn_too_large` (current: the bytes the turn would have) |
-- `results_too_large` (current: the bytes the step's results would have) | `storage` (current: the growth refused) |
-- `posted` (current: the entry of the message posted before, JSON) | `applied` (current: the token's entry, JSON).
-- The `message.appended` event carries what was added, not the whole turn: `{index, into_last, role, content}`
-- (`index`: the turn's place in the live history).
--- @include "includes/notice"
--- @include "includes/event-log"
--- @include "includes/blocks"
--- @include "includes/recent"
local meta = KEYS[1]
local guard = cjson.decode(ARGV[1])
if guard.create then
  if redis.call('EXISTS', meta) == 1 then return {'ERR', 'exists', ''} end
elseif redis.call('EXISTS', meta) == 0 then
  return {'ERR', 'not_found', ''}
end
-- Before the other guards: the change this token made moved the revision and the status the retry expects.
if guard.applied then
  local before = recent_find(meta, 'idem_applied', 't', guard.applied.t)
  if before then return {'ERR', 'applied', before} end
end
local cur = redis.call('HMGET', meta, 'fence', 'revision', 'status')
if guard.fence and tonumber(cur[1]) ~= guard.fence then return {'ERR', 'fenced', tostring(cur[1])} end
if guard.rev and tonumber(cur[2]) ~= guard.rev then return {'ERR', 'revision', tostring(cur[2])} end
if guard.status then
  local ok = false
  for _, s in ipairs(guard.status) do if s == cur[3] then ok = true end end
  if not ok then return {'ERR', 'status', tostring(cur[3])} end
end
if guard.fields then
  for k, v in pairs(guard.fields) do
    if (redis.call('HGET', meta, k) or '') ~= v then return {'ERR', 'revision', tostring(cur[2])} end
  end
end
if guard.posted then
  local before = recent_find(meta, 'chat_posted', 'id', guard.posted.id)
  if before then return {'ERR', 'posted', before} end
end

local ops = cjson.decode(ARGV[2])
if guard.turn_max and ops.queue_push then
  -- The turn the follow-ups will join: the trailing user turn if the history ends with one, and all queued.
  local last = redis.call('LINDEX', KEYS[2], -1)
  local bytes = blocks_is_user(last) and #last or 0
  for _, e in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do bytes = bytes + #e end
  for _, e in ipairs(ops.queue_push) do bytes = bytes + #e end
  if bytes > guard.turn_max then return {'ERR', 'turn_too_large', tostring(bytes)} end
end
if guard.results_max and ops.hset and ops.hset.pending ~= '' then
  -- The tool results of the step (its `result:*` fields, store/pending.ts) after this write, against those before it:
  -- a write that grows them past `results_max` (bytes) is refused. Checked here, with the write, so results written
  -- at once cannot each pass on a read that did not see the other.
  local before, after = 0, 0
  for _, f in ipairs(redis.call('HKEYS', meta)) do
    if string.sub(f, 1, 7) == 'result:' then
      local n = redis.call('HSTRLEN', meta, f)
      local v = ops.hset[f]
      before = before + n
      after = after + (type(v) == 'string' and #v or n)
    end
  end
  for f, v in pairs(ops.hset) do
    if string.sub(f, 1, 7) == 'result:' and type(v) == 'string' and redis.call('HEXISTS', meta, f) == 0 then
      after = after + #v
    end
  end
  if after > guard.results_max and after > before then return {'ERR', 'results_too_large', tostring(after)} end
end

-- Storage (see the header): the growth of `hset` fields and of list elements `sets` (`{index, value}` each) rewrites.
local function field_growth(hset)
  local n = 0
  for k, v in pairs(hset) do n = n + #v - redis.call('HSTRLEN', meta, k) end
  return n
end
local function element_growth(key, sets)
  local n = 0
  for _, p in ipairs(sets) do
    local old = redis.call('LINDEX', key, p[1])
    n = n + #p[2] - (old and #old or 0)
  end
  return n
end
local function rewrite_growth(o)
  if not o then return 0 end
  return (o.hset and field_growth(o.hset) or 0) + (o.lset_msgs and element_growth(KEYS[2], o.lset_msgs) or 0) +
    (o.lset_iters and element_growth(KEYS[3], o.lset_iters) or 0)
end
-- A client's write past its tenant's room: weighed before anything is written. Such a write (unfenced) never
-- compacts, so its `lset_msgs` name the elements as they stand now; `queue.none`, which may not apply, counts only
-- if it grows.
if guard.room and not guard.create then
  local g = rewrite_growth(ops) + math.max(0, rewrite_growth(ops.queue and ops.queue.none))
  if g > 0 and g > guard.room then return {'ERR', 'storage', tostring(g)} end
end
-- A staged history whose parts did not all land (an expiry passed, a part failed): nothing is written.
if ops.stage and redis.call('LLEN', KEYS[8]) ~= ops.stage.count then return {'ERR', 'stage', ''} end
-- Likewise a staged segment not whole (a part failed, its expiry passed).
if ops.compact and ops.compact.staged and redis.call('STRLEN', KEYS[8]) ~= ops.compact.staged.bytes then
  return {'ERR', 'stage', ''}
end
local quiet = ops.keep_revision == true
local rev
if quiet then rev = tonumber(cur[2]) or 0 else rev = redis.call('HINCRBY', meta, 'revision', 1) end
-- The revision the events carry: none for a change that moves none.
local ev_rev = not quiet and rev or nil
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if guard.create and ops.now then now = string.format('%d', ops.now) end

local notice_max = tonumber(ARGV[5])
-- Bytes counted here (see Storage in the header).
local grown = 0
local function emit(ev)
  local data = ev[2]
  -- A third element asks for the new revision in the data, which only the script knows.
  if ev[3] and ev_rev then data = (string.gsub(data, '"revision":null', '"revision":' .. ev_rev, 1)) end
  notice_before(KEYS[5], meta)
  local id = log_xadd(KEYS[5], ev[1], data, ev_rev, now)
  notice_add(notice_max, id, ev[1], now, ev_rev or '0', data)
end

local function pushAll(key, list)
  for i = 1, #list, 1000 do
    redis.call('RPUSH', key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- The history's first `c.count` messages become a kept segment; the summary message takes their place. Built by
-- concatenation (no JSON decoding), so the messages are kept byte for byte. A large segment (`c.staged`) was built
-- by the store from the committed history it holds (each message's JSON.stringify, as the store writes them) and
-- appended in parts to KEYS[8] (one script would take too long to build or push it, and stall every tenant): the key is
-- kept as it is (its expiry removed) and the list gets a stub naming it, `{"at_iteration":n,"key":"<suffix>",
-- "bytes":<length>}` (KEYS[8] is keys.ts `segment` .. suffix; readers resolve it: src/store/store.ts
-- `compacted`, `segmentAt`, segment-if-fits-1.lua), and the meta field `seg_keys` lists the suffix, so the
-- session's delete drops it (destroy-11.lua). What stays of the history is trimmed in place, never copied.
local function compact(c)
  local len = redis.call('LLEN', KEYS[2])
  local moved = math.min(c.count, len)
  local bytes, count
  if c.staged then
    bytes = c.staged.bytes
    redis.call('PERSIST', KEYS[8])
    count = redis.call('RPUSH', KEYS[7],
      '{"at_iteration":' .. c.at_iteration .. ',"key":"' .. c.staged.key .. '","bytes":' .. bytes .. '}')
    local keys = redis.call('HGET', meta, 'seg_keys')
    redis.call('HSET', meta, 'seg_keys', (keys and keys ~= '') and (keys .. ' ' .. c.staged.key) or c.staged.key)
  else
    local segment = '{"at_iteration":' .. c.at_iteration .. ',"messages":[' ..
      table.concat(redis.call('LRANGE', KEYS[2], 0, c.count - 1), ',') .. ']}'
    bytes = #segment
    count = redis.call('RPUSH', KEYS[7], segment)
  end
  -- `seg_bytes`: anchored by the segment count it was written at, so its entries name their segments by index (the
  -- last one segment count - 1), whatever was pushed since. They are kept only if they end right below this segment
  -- (written at count - 1): after a segment an older version pushed (with no entry) they do not, and are dropped;
  -- the segments they named are weighed when read. An entry of another form (an older version's) becomes '?'.
  local entries = {}
  local anchor, tail = string.match(redis.call('HGET', meta, 'seg_bytes') or '', '^(%d+)(.*)$')
  if tonumber(anchor) == count - 1 then
    for e in string.gmatch(tail, '%S+') do
      entries[#entries + 1] = (string.match(e, '^%d+,%d+,[ua]$') or string.match(e, '^%d+,%d+$')) and e or '?'
    end
  end
  entries[#entries + 1] = bytes .. ',' .. c.at_iteration .. ',' .. (c.ends_with_user and 'u' or 'a')
  redis.call('HSET', meta, 'seg_bytes',
    count .. ' ' .. table.concat(entries, ' ', math.max(1, #entries - (c.sizes or 16) + 1), #entries))
  -- `seg_counts`: where each segment's messages are in the session's whole record, so that a read of a few of them
  -- (GET …/iterations/:n, a fork) goes to the segment holding them without reading those before it (src/store/
  -- store.ts `segmentFor`): `<index> <start> <count> …`, segment <index>'s first message being message <start> of
  -- the whole record, then each segment's message count from it on, the last this one's (`moved`, what `msg_base`
  -- grows by). A run starts at `msg_base` as it is before this compaction (the whole-record index of the history's
  -- first message, this segment's first). A segment an older version pushed (no count) breaks the run: then this one
  -- starts a new run. A few bytes per compaction.
  local run_at, run_start, counts = string.match(redis.call('HGET', meta, 'seg_counts') or '', '^(%d+) (%d+)(.*)$')
  local counted = 0
  if counts then for _ in string.gmatch(counts, '%d+') do counted = counted + 1 end end
  if run_at and tonumber(run_at) + counted == count - 1 then
    redis.call('HSET', meta, 'seg_counts', run_at .. ' ' .. run_start .. counts .. ' ' .. moved)
  else
    redis.call('HSET', meta, 'seg_counts',
      (count - 1) .. ' ' .. (redis.call('HGET', meta, 'msg_base') or '0') .. ' ' .. moved)
  end
  -- LTRIM past the end empties (deletes) the list: the summary is then its only message.
  redis.call('LTRIM', KEYS[2], moved, -1)
  redis.call('LPUSH', KEYS[2], c.summary)
  redis.call('HINCRBY', meta, 'msg_base', moved)
end

-- Keeps the first n entries of a list; n = 0 keeps none (LTRIM 0 -1 would keep them all).
local function keep_first(key, n)
  if n == 0 then redis.call('DEL', key) else redis.call('LTRIM', key, 0, n - 1) end
end

local function run(o)
  if not o then return end
  if o.compact then compact(o.compact) end
  if o.trim_msgs then keep_first(KEYS[2], o.trim_msgs) end
  if o.lset_msgs then
    grown = grown + element_growth(KEYS[2], o.lset_msgs)
    for _, p in ipairs(o.lset_msgs) do redis.call('LSET', KEYS[2], p[1], p[2]) end
  end
  if o.push_msgs then pushAll(KEYS[2], o.push_msgs) end
  if o.stage then
    redis.call('RENAME', KEYS[8], KEYS[2])
    redis.call('PERSIST', KEYS[2])
  end
  if o.trim_iters then keep_first(KEYS[3], o.trim_iters) end
  if o.lset_iters then
    grown = grown + element_growth(KEYS[3], o.lset_iters)
    for _, p in ipairs(o.lset_iters) do redis.call('LSET', KEYS[3], p[1], p[2]) end
  end
  if o.push_iters then pushAll(KEYS[3], o.push_iters) end
  if o.hset then
    -- Result fields exist only beside a step: none to drop when there was none (most iterations).
    local drops = o.hset.pending == '' and redis.call('HSTRLEN', meta, 'pending') > 0
    -- A create's fields were counted whole by the store.
    if not guard.create then grown = grown + field_growth(o.hset) end
    local args = {}
    for k, v in pairs(o.hset) do args[#args + 1] = k; args[#args + 1] = v end
    if #args > 0 then redis.call('HSET', meta, unpack(args)) end
    if drops then grown = grown - blocks_drop_results(meta) end
  end
  if o.hincr then for k, v in pairs(o.hincr) do redis.call('HINCRBY', meta, k, v) end end
  if o.count_once then
    for _, c in ipairs(o.count_once) do
      if redis.call('HSETNX', meta, c[1], '1') == 1 then
        for k, v in pairs(c[2]) do redis.call('HINCRBY', meta, k, v) end
      end
    end
  end
  if o.queue_push then pushAll(KEYS[4], o.queue_push) end
  if o.release_lease then redis.call('DEL', KEYS[6]) end
  if o.events then for _, ev in ipairs(o.events) do emit(ev) end end
end

-- The results turn is read before `run`, whose clearing of `pending` drops the stored results.
if ops.queue and ops.queue.results then
  ops.queue.base = blocks_results(meta, ops.queue.results, ops.queue.cache_last)
end
run(ops)
local merged_count = 0
local appended = ''
local into_last = 0
if ops.queue then
  local entries = redis.call('LRANGE', KEYS[4], 0, -1)
  merged_count = #entries
  local parts = {}
  if ops.queue.base then parts[1] = ops.queue.base end
  for _, e in ipairs(entries) do parts[#parts + 1] = e end
  local blocks = blocks_join(parts)
  if ops.queue.into_last and merged_count > 0 then
    redis.call('LSET', KEYS[2], -1, blocks_append(redis.call('LINDEX', KEYS[2], -1), blocks))
    appended, into_last = blocks, 1
  elseif #parts > 0 and not ops.queue.into_last then
    redis.call('RPUSH', KEYS[2], '{"role":"user","content":' .. blocks .. '}')
    appended = blocks
  end
  -- The queued follow-ups were counted when queued; the base (a step's results) is new to the history.
  if appended ~= '' and ops.queue.base then grown = grown + #ops.queue.base end
  if merged_count > 0 then
    redis.call('DEL', KEYS[4])
    local index = redis.call('LLEN', KEYS[2]) - 1
    local data = '{"index":' .. index .. ',"into_last":' .. (into_last == 1 and 'true' or 'false') ..
      ',"role":"user","content":' .. appended .. '}'
    grown = grown + #data
    emit({'message.appended', data})
  else
    run(ops.queue.none)
  end
end
if ops.spend_open then
  -- The entries still open (above `spend_recorded`), oldest first, then this change's turn; at most SPEND_OPEN_MAX.
  local SPEND_OPEN_MAX = 32
  local through = tonumber(ops.spend_recorded)
  local open = {}
  for entry in string.gmatch(redis.call('HGET', meta, 'spend_open') or '', '[^;]+') do
    local seq = tonumber(string.match(entry, '^(%d+)|'))
    if seq and (not through or seq > through) then open[#open + 1] = entry end
  end
  open[#open + 1] = rev .. '|' .. ops.spend_open
  local first = math.max(1, #open - SPEND_OPEN_MAX + 1)
  redis.call('HSET', meta, 'spend_open', table.concat(open, ';', first, #open))
end
if not quiet then
  local stamp = now
  local before = tonumber(redis.call('HGET', meta, 'updated_at') or '')
  if not guard.create and before and before > tonumber(now) then stamp = string.format('%d', before) end
  redis.call('HSET', meta, 'updated_at', stamp, 'msg_count', redis.call('LLEN', KEYS[2]))
end
if guard.posted then
  local p = guard.posted
  local idle = redis.call('HGET', meta, 'status') ~= 'running'
  recent_add(meta, 'chat_posted', {id = p.id, fp = p.fp, after = p.after, rev = rev, idle = idle}, p.keep)
end
if guard.applied then
  local a = guard.applied
  recent_add(meta, 'idem_applied', {t = a.t, q = a.q, after = a.after, message = a.message}, a.keep)
end
if grown ~= 0 then redis.call('HINCRBY', meta, 'bytes', grown) end
log_trim(KEYS[5], meta, tonumber(ARGV[3]), tonumber(ARGV[6]))
notice_publish(ARGV[4])
local after = redis.call('HMGET', meta, 'control', 'params_rev')
return {rev, merged_count, appended, into_last, after[1] or '', after[2] or '0', grown}
