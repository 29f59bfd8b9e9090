-- client-token-revoke: removes one client token of a session, so the next request with it is refused. Never
-- refused for storage (it frees a credential): the record's bytes are given back to the session's `bytes` and
-- `ct_bytes` (at most what `ct_bytes` holds, see client-token-mint-2.lua), and ARGV[2] (its `client_token.revoked`
-- event, appended after this script) added to `bytes`, as every event of the session's is.
-- KEYS[1] meta (hash of the session)  KEYS[2] tokens (hash, see client-token-mint-2.lua)
-- ARGV[1] token id  ARGV[2] bytes of the revoke's event
-- Returns {1, added} when the token was removed (`added`: the bytes added to the session's `bytes`, negative when
-- given back, which the caller adds to its tenant's count), {0, 0} when the session holds no token with this id.
local hash = redis.call('HGET', KEYS[2], 'i:' .. ARGV[1])
if not hash then return {0, 0} end
local record = redis.call('HGET', KEYS[2], 'h:' .. hash)
redis.call('HDEL', KEYS[2], 'i:' .. ARGV[1], 'h:' .. hash)
-- (A session's delete deletes its tokens with it: a token without its session is not met; nothing to count then.)
if redis.call('EXISTS', KEYS[1]) == 0 then return {1, 0} end
local charged = tonumber(redis.call('HGET', KEYS[1], 'ct_bytes') or '0')
local freed = 2 + #ARGV[1] + #hash + 2 + #hash + (record and #record or 0)
if freed > charged then freed = charged end
local added = tonumber(ARGV[2]) - freed
redis.call('HSET', KEYS[1], 'ct_bytes', charged - freed)
redis.call('HINCRBY', KEYS[1], 'bytes', added)
return {1, added}
