-- client-token-mint: stores a client token of a session (spec §7.2), if the session exists and holds fewer than
-- ARGV[6] tokens that are still answered for. The hash holds, per token, `h:<sha256 of the token>` → its record
-- (JSON with `id` and `expires_at` ms) and `i:<token id>` → the sha256, so a token is found by its hash (each
-- request) and by its id (revocation). Records past `expires_at` + ARGV[7] ms are dropped on the way. The hash
-- expires when its longest-kept record does.
-- KEYS[1] meta (hash of the session)  KEYS[2] tokens (hash)
-- ARGV[1] sha256 of the token (hex)  ARGV[2] token id  ARGV[3] record JSON  ARGV[4] kept until (ms, epoch)
-- ARGV[5] now (ms)  ARGV[6] most tokens kept per session  ARGV[7] how long an expired record is kept (ms)
-- Returns 1 when stored, 0 when the session does not exist, -1 when the session holds ARGV[6] tokens already.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local now = tonumber(ARGV[5])
local grace = tonumber(ARGV[7])
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
      if ok and type(rec) == 'table' and type(rec.id) == 'string' then redis.call('HDEL', KEYS[2], 'i:' .. rec.id) end
    end
  end
end
if kept >= tonumber(ARGV[6]) then return -1 end
redis.call('HSET', KEYS[2], 'h:' .. ARGV[1], ARGV[3], 'i:' .. ARGV[2], ARGV[1])
local until_ms = tonumber(ARGV[4])
local ttl = redis.call('PTTL', KEYS[2])
if ttl < 0 or now + ttl < until_ms then redis.call('PEXPIREAT', KEYS[2], until_ms) end
return 1
