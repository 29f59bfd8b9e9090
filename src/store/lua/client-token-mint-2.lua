-- client-token-mint: stores a client token of a session (spec §7.2), if the session exists and holds fewer than
-- ARGV[6] tokens that are still answered for. The hash holds, per token, `h:<sha256 of the token>` → its record
-- (JSON with `id` and `expires_at` ms) and `i:<token id>` → the sha256, so a token is found by its hash (each
-- request) and by its id (revocation). Records past `expires_at` + ARGV[7] ms are dropped on the way. The hash
-- expires when its longest-kept record does.
-- Storage (TENANT_MAX_BYTES, src/store/storage-quota.ts): a stored token's two fields and ARGV[8] (its
-- `client_token.created` event, appended after this script) are added to the session's `bytes`, as every write of
-- the session's is, so its delete gives them back. The meta field `ct_bytes` holds the bytes of the records so
-- charged and still in the hash: a record dropped here gives its bytes back, and so do all of them when the hash
-- has expired since (its last record did); never more than `ct_bytes` (a record of before it was counted was never
-- charged). The event's bytes stay charged until the session's delete, as its other events' do.
-- KEYS[1] meta (hash of the session)  KEYS[2] tokens (hash)
-- ARGV[1] sha256 of the token (hex)  ARGV[2] token id  ARGV[3] record JSON  ARGV[4] kept until (ms, epoch)
-- ARGV[5] now (ms)  ARGV[6] most tokens kept per session  ARGV[7] how long an expired record is kept (ms)
-- ARGV[8] bytes of the mint's event
-- (ARGV[6] 0: release only, what a mint refused for storage runs: the expired records dropped and their bytes given
-- back, nothing stored; it returns -1 then.)
-- Returns {code, added}: code 1 when stored, 0 when the session does not exist, -1 when the session holds ARGV[6]
-- tokens already; `added` the bytes added to the session's `bytes` (negative: given back), which the caller adds to
-- its tenant's count.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local now = tonumber(ARGV[5])
local grace = tonumber(ARGV[7])
local charged = tonumber(redis.call('HGET', KEYS[1], 'ct_bytes') or '0')
local freed = 0
if redis.call('EXISTS', KEYS[2]) == 0 then freed = charged end
local all = redis.call('HGETALL', KEYS[2])
local kept = 0
for i = 1, #all, 2 do
  local field = all[i]
  if string.sub(field, 1, 2) == 'h:' then
    local ok, rec = pcall(cjson.decode, all[i + 1])
    if ok and type(rec) == 'table' and tonumber(rec.expires_at) and tonumber(rec.expires_at) + grace > now then
      kept = kept + 1
    else
      redis.call('HDEL', KEYS[2], field)
      freed = freed + #field + #all[i + 1]
      if ok and type(rec) == 'table' and type(rec.id) == 'string' then
        redis.call('HDEL', KEYS[2], 'i:' .. rec.id)
        freed = freed + 2 + #rec.id + #field - 2
      end
    end
  end
end
if freed > charged then freed = charged end
local code, added = -1, 0
if kept < tonumber(ARGV[6]) then
  redis.call('HSET', KEYS[2], 'h:' .. ARGV[1], ARGV[3], 'i:' .. ARGV[2], ARGV[1])
  local until_ms = tonumber(ARGV[4])
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl < 0 or now + ttl < until_ms then redis.call('PEXPIREAT', KEYS[2], until_ms) end
  -- (as the record's bytes are counted when it is dropped above, or revoked: client-token-revoke-2.lua)
  local record = 2 + #ARGV[1] + #ARGV[3] + 2 + #ARGV[2] + #ARGV[1]
  code, added = 1, record + tonumber(ARGV[8])
  charged = charged + record
end
if freed > 0 or code == 1 then
  redis.call('HSET', KEYS[1], 'ct_bytes', charged - freed)
  redis.call('HINCRBY', KEYS[1], 'bytes', added - freed)
end
return {code, added - freed}
