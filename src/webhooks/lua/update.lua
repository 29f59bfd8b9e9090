-- update: change or delete one webhook, guarded by tenant and revision.
-- KEYS[1] webhook (hash)  KEYS[2..] its outbox keys (deleted with it)
-- ARGV[1] tenant  ARGV[2] expected revision ('' for any)  ARGV[3] 'patch' | 'delete'  ARGV[4] fields JSON (patch;
-- `disabled: "0"` also clears `failing_since`)
-- Returns {'ERR', 'not_found'} | {'ERR', 'revision', current} (nothing written), or {'OK', new revision} (0 when
-- deleted).
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return {'ERR', 'not_found'} end
local rev = redis.call('HGET', KEYS[1], 'revision')
if ARGV[2] ~= '' and rev ~= ARGV[2] then return {'ERR', 'revision', rev} end
if ARGV[3] == 'delete' then
  redis.call('DEL', unpack(KEYS))
  return {'OK', 0}
end
local fields = cjson.decode(ARGV[4])
for k, v in pairs(fields) do redis.call('HSET', KEYS[1], k, v) end
if fields.disabled == '0' then redis.call('HDEL', KEYS[1], 'failing_since') end
return {'OK', redis.call('HINCRBY', KEYS[1], 'revision', 1)}
