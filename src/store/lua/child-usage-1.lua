-- child-usage: adds a sub-agent's usage to its parent's `u_child_*` counters once per child, whatever becomes of the
-- call it answers (delivered, answered by the parent's client, cancelled with the parent): the parent's meta hash
-- field `cb:<child id>` marks it counted (a timeout that cut the child counted it in its own write and set it too).
-- KEYS[1] the parent's meta (hash)
-- ARGV[1] the child's id  ARGV[2..] field, increment, field, increment, ...
-- Returns 1 when counted now, 0 when counted before (or the parent is gone).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], 'cb:' .. ARGV[1], '1') == 0 then return 0 end
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
