-- claim: KEYS[1] record; ARGV: now, fingerprint, owner, lease (µs),
-- retention (µs). Grants the key when there is no live record, when the
-- record is RELEASED, or when the same fingerprint's lease has ended; the
-- epoch then grows by one from the stored record, if any. Replies
-- reply(1, ...) with the new claim, or reply(0, ...) with the record that
-- prevented it, unchanged.
local key = KEYS[1]
local now, injected = clock(ARGV[1])
local fingerprint, owner = ARGV[2], ARGV[3]
local lease, retention = tonumber(ARGV[4]), tonumber(ARGV[5])

local r = load(key)
local epoch = 0
if r ~= nil then
  epoch = r.epoch
  local grant = not live(r, now)
    or r.state == RELEASED
    or (r.state == PROCESSING and r.fingerprint == fingerprint and r.lease_until <= now)
  if not grant then
    return reply(0, now, r)
  end
end

r = {
  fingerprint = fingerprint,
  state = PROCESSING,
  epoch = epoch + 1,
  owner = owner,
  unknown = false,
  lease_until = now + lease,
  expires_at = now + retention,
  response = '',
}
save(key, r, now, injected)
return reply(1, now, r)
