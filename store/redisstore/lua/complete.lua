-- complete: KEYS[1] record; ARGV: now, epoch, owner, response, retention
-- (µs). Moves a held record to DONE with the response, clears the lease and
-- unknown, and keeps it for retention from now. Replies 1, or the fenced
-- error.
local key = KEYS[1]
local now, injected = clock(ARGV[1])
local r = load(key)
if not held(r, now, ARGV[2], ARGV[3]) then
  return fenced()
end
r.state = DONE
r.unknown = false
r.lease_until = 0
r.expires_at = now + tonumber(ARGV[5])
r.response = ARGV[4]
save(key, r, now, injected)
return 1
