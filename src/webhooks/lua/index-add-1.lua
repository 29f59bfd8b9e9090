-- index-add: list a new webhook in its tenant's index, within the tenant's limit.
-- KEYS[1] tenant's webhooks (hash webhook id -> {"events", "disabled", "created_at"} JSON)
-- ARGV[1] webhook id  ARGV[2] entry JSON  ARGV[3] most webhooks per tenant
-- Returns 1, or 0 when the tenant has its limit (nothing written).
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
