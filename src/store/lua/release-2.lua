-- release: drop the run lease if it is still ours, and the session's open spend its run recorded.
-- KEYS[1] lease (string)  KEYS[2] meta (hash)
-- ARGV[1] `<owner>:<fence>`
-- ARGV[2] the seq of the spend the run recorded last ('' : none): the meta field `spend_open` is dropped if it is
--         still that one's (`<seq>|…`: src/cost/spend.ts OpenSpend), whoever holds the lease; a later one stays
-- Returns 1 if the lease was released, 0 if it is gone or another's.
if ARGV[2] ~= '' then
  local open = redis.call('HGET', KEYS[2], 'spend_open')
  if open and string.sub(open, 1, #ARGV[2] + 1) == ARGV[2] .. '|' then redis.call('HDEL', KEYS[2], 'spend_open') end
end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
