-- get: KEYS[1] record; ARGV: now. Replies reply(1, ...) with the live
-- record, or nil (redis.Nil, ErrNotFound) when there is none. A script rather
-- than HGETALL so that liveness is judged on the same clock as the writes.
local key = KEYS[1]
local now = clock(ARGV[1])
local r = load(key)
if r == nil or not live(r, now) then
  return false
end
return reply(1, now, r)
