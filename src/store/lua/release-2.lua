-- release: drop the run lease if it is still ours, and the session's open spend its run recorded.
-- KEYS[1] lease (string)  KEYS[2] meta (hash)
-- ARGV[1] `<owner>:<fence>`
-- ARGV[2] the seq through which the run recorded the session's spend in its tenant's day ('' : none): the entries
--         of the meta field `spend_open` (`<seq>|…` joined by `;`, oldest first: src/cost/spend.ts OpenSpend) at or
--         below it are dropped, whoever holds the lease, and the field with them when none is left; a later one (a
--         turn whose record failed through the run's end, or a takeover's) stays, for the next claim (or the runs'
--         sweep, when the session is still due) to record
-- Returns 1 if the lease was released, 0 if it is gone or another's.
if ARGV[2] ~= '' then
  local through = tonumber(ARGV[2])
  local open = redis.call('HGET', KEYS[2], 'spend_open')
  if open then
    local kept = {}
    for entry in string.gmatch(open, '[^;]+') do
      local seq = tonumber(string.match(entry, '^(%d+)|'))
      if seq and seq > through then kept[#kept + 1] = entry end
    end
    if #kept == 0 then
      redis.call('HDEL', KEYS[2], 'spend_open')
    else
      local left = table.concat(kept, ';')
      if left ~= open then redis.call('HSET', KEYS[2], 'spend_open', left) end
    end
  end
end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
