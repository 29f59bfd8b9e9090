-- tool-put: register or replace a tenant tool, within the tenant's limit, bumping its revision (If-Match checked).
-- The tool keeps its `created_at`, and an http tool its sealed secret: the secret is made here, in the same write as
-- the tool, so of two PUTs making one tool at once exactly one makes the secret (and shows it), and it is the one
-- stored.
-- KEYS[1] the tenant's tools (hash name -> definition JSON, with `created_at`, `secret`?, `revision`)
-- ARGV[1] name  ARGV[2] definition JSON without `created_at`, `secret`, `revision` (an object: those are spliced in
-- before its `}`)  ARGV[3] most tools per tenant  ARGV[4] the revision If-Match expects ('' for none)
-- ARGV[5] now (ms: a new tool's `created_at`)  ARGV[6] a new sealed secret for an http tool ('' for a worker tool),
-- used when the tool has none  ARGV[7] the request's Idempotency-Key token ('' for none), kept in the definition as
-- `applied` with what this PUT did (`created`, `secret_made`) until the next PUT, so a retry whose first request
-- died before its answer was kept answers as that one did (routes/tenant-tools.ts)
-- Returns {outcome, revision, created_at, 1 when ARGV[6] was stored else 0}: outcome 1 created, 0 replaced, -1 at the
-- tenant's limit, -2 when If-Match does not match (revision: the current one, 0 when none).
local old = redis.call('HGET', KEYS[1], ARGV[1])
local prev = old and cjson.decode(old) or nil
local current = 0
if prev then current = tonumber(prev.revision) or 1 end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= current then return {-2, current, 0, 0} end
if not prev and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return {-1, 0, 0, 0} end
local revision = current + 1
local created = tonumber(ARGV[5])
if prev and tonumber(prev.created_at) then created = tonumber(prev.created_at) end
local secret = ''
local made = 0
if ARGV[6] ~= '' then
  if prev and type(prev.secret) == 'string' then
    secret = prev.secret
  else
    secret = ARGV[6]
    made = 1
  end
end
local def = string.sub(ARGV[2], 1, -2) .. ',"created_at":' .. string.format('%d', created)
if secret ~= '' then def = def .. ',"secret":' .. cjson.encode(secret) end
if ARGV[7] ~= '' then
  def = def .. ',"applied":' .. cjson.encode({token = ARGV[7], created = not prev, secret_made = made == 1})
end
redis.call('HSET', KEYS[1], ARGV[1], def .. ',"revision":' .. revision .. '}')
if prev then return {0, revision, created, made} end
return {1, revision, created, made}
