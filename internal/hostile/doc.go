// Package hostile holds tests that attack a real `idem proxy` process as a
// hostile client would, measuring what the process itself spends: resident
// memory under stalled request bodies, and the latency an ordinary client
// sees meanwhile (reported as a ratio to the same client's latency before
// the attack, measured in the same run; never asserted, as timings are not
// in this project's tests).
//
// The CI version holds 300 stalled 1 MiB bodies; a longer one holds 3,000:
//
//	go test ./internal/hostile -run Stalled -v -args -hostile.n=3000
package hostile
