-- mark_unknown: KEYS[1] record; ARGV: now, epoch, owner. Sets unknown on a
-- held record and keeps its lease. Replies 1, or the fenced error.
local key = KEYS[1]
local now = clock(ARGV[1])
local r = load(key)
if not held(r, now, ARGV[2], ARGV[3]) then
  return fenced()
end
redis.call('HSET', key, 'unknown', '1')
return 1
