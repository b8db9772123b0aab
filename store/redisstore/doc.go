// Package redisstore is the Redis store of idem's request keys
// (store.Store), on go-redis v9. Use it when several idem processes share a
// Redis they already run; it keeps request keys only and shares no
// transaction with business data (no store.TxStore), so an effect is made
// exactly-once by the fence and the caller's downstream idempotency, not by
// a shared commit.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	s, err := redisstore.New(ctx, client, nil)
//
// # Records and atomic steps
//
// A record is a hash at Config.Prefix+key (keys are opaque bytes, and Redis
// keys are binary safe) with the fields fingerprint, state, epoch, owner,
// unknown, lease_until, expires_at and response; times are integer
// microseconds since the Unix epoch. Each step (claim, complete, release,
// extend, mark unknown, get) is one Lua script in lua/, run with EVALSHA
// (EVAL when the server's script cache lacks it): Redis runs a script
// atomically, so a claim never checks and sets across round trips, and 64
// concurrent claims of one key grant exactly one. Every write by a holder
// checks epoch, owner and state PROCESSING inside its script and otherwise
// answers an IDEM_FENCED error reply, which the store maps to
// store.ErrFenced. Time is the server's (TIME inside the script), so all
// processes agree on leases, unless Config.Now injects a clock.
//
// # Retention
//
// Redis deletes records itself: each script sets the hash's TTL to
// expires_at (PEXPIREAT, rounded up to the millisecond), or to lease_until
// while a live lease outlasts it, so that Redis never drops a held claim.
// Sweep therefore does nothing and returns 0, nil, and Capabilities reports
// SelfExpiring. Scripts also judge expiry themselves, so a record is gone
// at exactly expires_at even in the millisecond before Redis deletes it.
// A fenced write to an expired record is ErrFenced: in Redis an expired
// record is a swept one.
//
// Once Redis has deleted a record the next claim of the key starts again at
// epoch 1. The owner token, part of every fence, still tells the old holder
// from the new one; keeping epochs monotonic across expiry would take a
// second key per record that outlives it, which is not worth its memory.
//
// # Durability
//
// A claim survives a crash of Redis and of its machine only with the
// append-only file fsynced before every answer: appendonly yes and
// appendfsync always (everysec may lose the last second of claims, and an
// RDB snapshot more). New reads both settings with CONFIG GET and refuses a
// server without them, with an error wrapping ErrNotDurable that names the
// missing setting, unless Config.AllowNonDurable is set;
// Capabilities().Durable reports the result. Where CONFIG is disabled
// (managed Redis) the store cannot tell and counts the server as not
// durable. Durability covers one server: a failover to a replica that had
// not received a claim loses it whatever the settings, and in a cluster
// CONFIG GET reads one node, so keep the settings uniform.
//
// # Why go-redis
//
// go-redis is Redis' official Go client, maintained and in broad use; its
// Script helper does EVALSHA with the EVAL fallback, and it takes any
// redis.UniversalClient (single node, sentinel, cluster). rueidis' automatic
// pipelining and client-side caching buy nothing here: each step is one
// script call on one key.
package redisstore
