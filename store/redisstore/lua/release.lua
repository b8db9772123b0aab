-- release: KEYS[1] record; ARGV: now, epoch, owner. Moves a held record to
-- RELEASED and clears its lease and unknown (a release says the operation
-- failed without effect), keeping expires_at. Replies 1, or the fenced
-- error.
local key = KEYS[1]
local now, injected = clock(ARGV[1])
local r = load(key)
if not held(r, now, ARGV[2], ARGV[3]) then
  return fenced()
end
r.state = RELEASED
r.unknown = false
r.lease_until = 0
save(key, r, now, injected)
return 1
