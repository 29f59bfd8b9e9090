-- log-newest: the id of an event log's newest entry, learnt without reading that entry (every entry a script reads is
-- copied whole into its Lua, up to ~1 MB, while Redis serves no one else) from the meta hash's `ev_last`, the newest
-- id written (recorded by includes/event-log.lua `log_trim`).
-- The record is checked by a read of what follows it (`XRANGE (<id> + COUNT 1`: empty, nothing copied). A log's ids
-- only grow (XADD `*` never goes below the stream's last id, and no trim drops the newest), so with nothing after it
-- the record is the newest; only a log deleted and written again at ids below the record (in its millisecond, or by a
-- Redis clock gone back) while the hash kept it would fool the check, and read-events-2.lua takes the record then
-- too. An entry that does follow (written by a writer that did not record it: a replica of an older release, a
-- write to a log whose meta hash is gone) is copied by that check, and the newest entry is read for its id, as for a
-- log with no record (written before it existed, its meta hash gone, or no meta given). An empty log (or none) has
-- no newest, whatever the hash says.
-- log_newest(key, meta): the id (false: empty or gone); `meta` may be nil (no record: the newest entry is read).
local function log_newest(key, meta)
  if redis.call('XLEN', key) == 0 then return false end
  local last = meta and redis.call('HGET', meta, 'ev_last')
  if last and not redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', 1)[1] then return last end
  local row = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  return row and row[1] or false
end
