-- extend: KEYS[1] record; ARGV: now, epoch, owner, lease (µs). Sets
-- lease_until = now+lease on a held record, raising expires_at to it when it
-- was earlier. Replies the new lease_until, or the fenced error.
local key = KEYS[1]
local now, injected = clock(ARGV[1])
local r = load(key)
if not held(r, now, ARGV[2], ARGV[3]) then
  return fenced()
end
r.lease_until = now + tonumber(ARGV[4])
if r.expires_at < r.lease_until then
  r.expires_at = r.lease_until
end
save(key, r, now, injected)
return r.lease_until
