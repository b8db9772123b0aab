package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// fiberRedis is fiber.Storage over go-redis, under a key prefix: what the
// idempotency middleware of Fiber v3 keeps its responses in. It is the
// adapter a Fiber user writes (or takes from gofiber/storage/redis, which
// does the same GET and SET with an expiry): one round trip per call.
type fiberRedis struct {
	client *redis.Client
	prefix string
}

func (s *fiberRedis) GetWithContext(ctx context.Context, key string) ([]byte, error) {
	b, err := s.client.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

func (s *fiberRedis) Get(key string) ([]byte, error) {
	return s.GetWithContext(context.Background(), key)
}

// SetWithContext ignores an empty key or value, as fiber.Storage says.
func (s *fiberRedis) SetWithContext(ctx context.Context, key string, val []byte, exp time.Duration) error {
	if key == "" || len(val) == 0 {
		return nil
	}
	return s.client.Set(ctx, s.prefix+key, val, exp).Err()
}

func (s *fiberRedis) Set(key string, val []byte, exp time.Duration) error {
	return s.SetWithContext(context.Background(), key, val, exp)
}

func (s *fiberRedis) DeleteWithContext(ctx context.Context, key string) error {
	return s.client.Del(ctx, s.prefix+key).Err()
}

func (s *fiberRedis) Delete(key string) error {
	return s.DeleteWithContext(context.Background(), key)
}

// ResetWithContext deletes every key under the prefix.
func (s *fiberRedis) ResetWithContext(ctx context.Context) error {
	iter := s.client.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := s.client.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

func (s *fiberRedis) Reset() error { return s.ResetWithContext(context.Background()) }

// Close does nothing: the client is shared and closed by its owner.
func (s *fiberRedis) Close() error { return nil }
