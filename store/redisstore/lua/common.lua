-- common.lua is prepended to every script (see scripts.go). It holds the
-- record layout and the helpers the scripts share.
--
-- A record is a hash with these fields (times in microseconds since the Unix
-- epoch, integers written in decimal):
--   fingerprint  bytes
--   state        1 PROCESSING, 2 DONE, 3 RELEASED (store.State)
--   epoch        claims of this key, 1 for the first
--   owner        token of the claim that holds (or last held) the key
--   unknown      "1" when the holder marked the outcome unknown, else "0"
--   lease_until  end of the lease; 0 unless PROCESSING
--   expires_at   end of the record's retention
--   response     stored result; empty unless DONE
--
-- ARGV[1] is the caller's clock in microseconds, or "" to use the server's
-- TIME. Scripts run atomically, so every read and write below is one step.

local PROCESSING, DONE, RELEASED = 1, 2, 3

-- int writes n as a decimal integer: Lua's own number formatting switches
-- to exponent notation above 1e14, which microsecond times are.
local function int(n)
  return string.format('%d', n)
end

-- clock returns now in microseconds and whether it came from the caller.
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg), true
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), false
end

-- load reads the record at key, or nil when there is none.
local function load(key)
  local v = redis.call('HMGET', key, 'fingerprint', 'state', 'epoch', 'owner',
    'unknown', 'lease_until', 'expires_at', 'response')
  if not v[2] then
    return nil
  end
  return {
    fingerprint = v[1] or '',
    state = tonumber(v[2]),
    epoch = tonumber(v[3]),
    owner = v[4] or '',
    unknown = v[5] == '1',
    lease_until = tonumber(v[6]),
    expires_at = tonumber(v[7]),
    response = v[8] or '',
  }
end

-- live reports whether r still exists for callers at now: before its
-- expires_at, or holding a lease that has not ended (a live lease keeps its
-- record even if a caller gave a retention shorter than the lease).
local function live(r, now)
  return r.expires_at > now or (r.state == PROCESSING and r.lease_until > now)
end

-- held reports whether the fence (epoch, owner) still holds r.
local function held(r, now, epoch, owner)
  return r ~= nil and r.state == PROCESSING and r.epoch == tonumber(epoch)
    and r.owner == owner and live(r, now)
end

-- fenced is the reply of a fenced write; the store maps it to ErrFenced.
local function fenced()
  return redis.error_reply('IDEM_FENCED fence does not match a held claim')
end

-- save writes every field of r and sets the hash's TTL so that Redis deletes
-- it at expires_at, but never before a live lease ends. With the caller's
-- clock the TTL is relative (PEXPIRE), so that a test clock far from the
-- server's does not make Redis delete a record the caller considers live;
-- with the server's clock it is absolute (PEXPIREAT). Both round up to the
-- millisecond: Redis keeps the hash at most 1ms past expires_at, and the
-- scripts treat it as gone by then (live).
local function save(key, r, now, injected)
  redis.call('HSET', key,
    'fingerprint', r.fingerprint,
    'state', int(r.state),
    'epoch', int(r.epoch),
    'owner', r.owner,
    'unknown', r.unknown and '1' or '0',
    'lease_until', int(r.lease_until),
    'expires_at', int(r.expires_at),
    'response', r.response)
  local at = r.expires_at
  if r.state == PROCESSING and r.lease_until > at then
    at = r.lease_until
  end
  if injected then
    redis.call('PEXPIRE', key, int(math.ceil((at - now) / 1000)))
  else
    redis.call('PEXPIREAT', key, int(math.ceil(at / 1000)))
  end
end

-- reply is the record as an array, after a flag and the clock:
-- {flag, now, fingerprint, state, epoch, owner, unknown, lease_until,
--  expires_at, response}. The store parses it in reply.go.
local function reply(flag, now, r)
  return {flag, now, r.fingerprint, r.state, r.epoch, r.owner,
    r.unknown and 1 or 0, r.lease_until, r.expires_at, r.response}
end
