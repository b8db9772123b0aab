//go:build race

package outbox_test

// raceEnabled: the race detector multiplies memory use (its shadow memory),
// so resident-set bounds are reported but not asserted under it.
const raceEnabled = true
