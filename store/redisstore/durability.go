package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// probeDurability asks the server whether it fsyncs every write before
// answering. durable is false with a reason when it does not, or when CONFIG
// is refused (managed services often disable it): the store cannot tell and
// must not claim durability. err is set only when the server could not be
// reached, so that New fails fast on a wrong address.
func probeDurability(ctx context.Context, client redis.UniversalClient) (durable bool, reason string, err error) {
	values := make(map[string]string, 2)
	for _, name := range []string{"appendonly", "appendfsync"} {
		got, err := client.ConfigGet(ctx, name).Result()
		if err != nil {
			var rerr redis.Error
			if errors.As(err, &rerr) {
				return false, fmt.Sprintf("CONFIG GET %s was refused (%v), so durability cannot be checked", name, err), nil
			}
			return false, "", fmt.Errorf("redisstore: CONFIG GET %s: %w", name, err)
		}
		values[name] = got[name]
	}
	durable, reason = durability(values["appendonly"], values["appendfsync"])
	return durable, reason, nil
}

// durability decides from the two settings: only an append-only file that
// is fsynced before every answer survives a crash of the machine
// (appendfsync everysec loses up to a second of writes, no leaves it to the
// kernel).
func durability(appendonly, appendfsync string) (durable bool, reason string) {
	if !strings.EqualFold(appendonly, "yes") {
		return false, fmt.Sprintf("appendonly is %q, need \"yes\"", appendonly)
	}
	if !strings.EqualFold(appendfsync, "always") {
		return false, fmt.Sprintf("appendfsync is %q, need \"always\"", appendfsync)
	}
	return true, ""
}
