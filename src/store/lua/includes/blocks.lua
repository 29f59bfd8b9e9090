-- blocks: a turn's content as it travels: the JSON text of an array of content blocks (`[{...},{...}]`), encoded
-- once by JSON.stringify where the blocks come from (a follow-up at its route, tool results in the engine) and never
-- decoded here: the blocks are joined as text, so every byte the client or tool gave reaches the model unchanged
-- (cjson would turn `[]` into `{}` and round numbers).
-- Use: blocks_join(list of array texts) -> one array text; a user turn as stored is `{"role":"user","content":<array>}`.
-- (A queue entry written before this format, the blocks without their brackets, is taken as it is.)
local function blocks_join(arrays)
  local inner = {}
  for _, a in ipairs(arrays) do
    if string.sub(a, 1, 1) ~= '[' then inner[#inner + 1] = a
    elseif #a > 2 then inner[#inner + 1] = string.sub(a, 2, -2) end
  end
  return '[' .. table.concat(inner, ',') .. ']'
end
-- The stored user turn `turn` (its content an array, so it ends in `]}`) with the blocks of `array` after its own.
local function blocks_append(turn, array)
  if #array <= 2 then return turn end
  if string.sub(turn, -3) == '[]}' then return string.sub(turn, 1, -3) .. string.sub(array, 2, -2) .. ']}' end
  return string.sub(turn, 1, -3) .. ',' .. string.sub(array, 2, -2) .. ']}'
end
-- Whether a stored message is a user turn as this service writes them (role first).
local function blocks_is_user(message)
  return message ~= false and string.sub(message, 1, 15) == '{"role":"user",'
end
-- The tool results turn (an array text) from `entries`, each `{id}` or `{id, block}` (store/pending.ts): a block
-- given is taken as it is; a named one is the call's stored result, the meta field `result:<id>` of `meta`, moved
-- without decoding. A call without either gets an error result, so the history stays valid. With `cache_last`, the
-- last block is a prompt-cache breakpoint (`cache_control` added as its last key).
local function blocks_results(meta, entries, cache_last)
  local out = {}
  for i, e in ipairs(entries) do
    local b = e[2]
    if not b then
      b = redis.call('HGET', meta, 'result:' .. e[1])
      if not b or b == '' then
        b = '{"type":"tool_result","tool_use_id":' .. cjson.encode(e[1]) .. ',"content":"Error: no result","is_error":true}'
      end
    end
    if cache_last and i == #entries then b = string.sub(b, 1, -2) .. ',"cache_control":{"type":"ephemeral"}}' end
    out[i] = b
  end
  return '[' .. table.concat(out, ',') .. ']'
end
-- Drops every `result:*`, `reported:*` and `retried:*` field of `meta`: they live as long as its pending step
-- (store/pending.ts; `retried:*`: tool-retried-2.lua). Returns the bytes of the values dropped that apply-8.lua wrote
-- and counted (`result:*`, `reported:*`), which it gives back; a `retried:*` value was never counted.
local function blocks_drop_results(meta)
  local drop = {}
  local bytes = 0
  for _, f in ipairs(redis.call('HKEYS', meta)) do
    if string.sub(f, 1, 7) == 'result:' or string.sub(f, 1, 9) == 'reported:' then
      drop[#drop + 1] = f
      bytes = bytes + redis.call('HSTRLEN', meta, f)
    elseif string.sub(f, 1, 8) == 'retried:' then
      drop[#drop + 1] = f
    end
  end
  if #drop > 0 then redis.call('HDEL', meta, unpack(drop)) end
  return bytes
end
