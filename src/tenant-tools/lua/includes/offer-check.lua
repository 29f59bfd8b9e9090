--- The call of offer `offer` and its record, or nil and the refusal ('unknown', 'lost', 'completed', 'cancelled');
--- with 'completed', the call's record too (its JSON as stored), read in the same script as the refusal: a worker is
--- told from it whether the call timed out (its `timed_out_at`: sweep-11.lua) or had a result (src/tenant-tools/service.ts).
local function offer_check(offers_key, calls_key, offer)
  local call = redis.call('HGET', offers_key, offer)
  if not call then return nil, 'unknown' end
  local raw = redis.call('HGET', calls_key, call)
  if not raw then return nil, 'unknown' end
  local rec = cjson.decode(raw)
  if rec.state == 'cancelled' then return nil, 'cancelled' end
  if rec.offer ~= offer then return nil, 'lost' end
  if rec.state ~= 'leased' then return nil, 'completed', raw end
  return call, rec
end
