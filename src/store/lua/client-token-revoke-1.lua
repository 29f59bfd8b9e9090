-- client-token-revoke: removes one client token of a session, so the next request with it is refused.
-- KEYS[1] tokens (hash, see client-token-mint-2.lua)
-- ARGV[1] token id
-- Returns 1 when the token was removed, 0 when the session holds no token with this id.
local hash = redis.call('HGET', KEYS[1], 'i:' .. ARGV[1])
if not hash then return 0 end
redis.call('HDEL', KEYS[1], 'i:' .. ARGV[1], 'h:' .. hash)
return 1
