package key

// ReplayCacheStats returns the entries and bytes in g's replay cache.
func ReplayCacheStats(g *Guard) (int, int64) { return g.replays.stats() }
