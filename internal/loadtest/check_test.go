package loadtest

import (
	"slices"
	"strings"
	"testing"
)

// histBuilder crafts histories. Body and response hashes are short names
// ("A", "B", "r1"): the checker only compares them.
type histBuilder struct {
	recs []Record
	op   int64
}

// opt changes the completion record.
type opt func(*Record)

func replayed(r *Record)           { r.Replayed = true }
func effect(id string) opt         { return func(r *Record) { r.Effect = id } }
func problemType(s string) opt     { return func(r *Record) { r.ProblemType = problemBase + s } }
func resp(h string) opt            { return func(r *Record) { r.RespHash = h } }
func withStatus(code int) opt      { return func(r *Record) { r.Status = code } }
func (h *histBuilder) next() int64 { h.op++; return h.op }

func (h *histBuilder) invoke(p, k, body string, call int64) int64 {
	op := h.next()
	h.recs = append(h.recs, Record{Type: TypeInvoke, Op: op, Client: int(op), Key: k, Principal: p, BodyHash: body, T: call})
	return op
}

func (h *histBuilder) complete(op int64, typ, p, k, body string, ret int64, opts ...opt) {
	r := Record{Type: typ, Op: op, Client: int(op), Key: k, Principal: p, BodyHash: body, T: ret}
	for _, o := range opts {
		o(&r)
	}
	h.recs = append(h.recs, r)
}

// ok records an answered operation over [call, ret].
func (h *histBuilder) ok(p, k, body string, call, ret int64, status int, opts ...opt) {
	op := h.invoke(p, k, body, call)
	h.complete(op, TypeOK, p, k, body, ret, append([]opt{withStatus(status)}, opts...)...)
}

func (h *histBuilder) info(p, k, body string, call, ret int64) {
	op := h.invoke(p, k, body, call)
	h.complete(op, TypeInfo, p, k, body, ret, func(r *Record) { r.Error = "timeout" })
}

func (h *histBuilder) fail(p, k, body string, call, ret int64) {
	op := h.invoke(p, k, body, call)
	h.complete(op, TypeFail, p, k, body, ret, func(r *Record) { r.Error = "connection refused" })
}

func eff(id, p, k, body string) Effect {
	return Effect{Kind: KindEffect, ID: id, Principal: p, Key: k, BodyHash: body}
}

func checkedKinds(rep *CheckReport) []string {
	var kinds []string
	for _, v := range rep.Violations {
		if !slices.Contains(kinds, v.Check) {
			kinds = append(kinds, v.Check)
		}
	}
	slices.Sort(kinds)
	return kinds
}

func reportText(rep *CheckReport) string {
	var b strings.Builder
	rep.WriteText(&b, 20)
	return b.String()
}

// TestCheckPassesValidHistories guards against false alarms: each scope is
// a legal (if unusual) interleaving a correct target can produce.
func TestCheckPassesValidHistories(t *testing.T) {
	t.Parallel()
	var h histBuilder
	var effects []Effect

	// Concurrent duplicate replayed before the executor's answer arrived,
	// and a concurrent other-body request refused.
	h.ok("p0", "k1", "A", 0, 100, 201, resp("r1"), effect("e1"))
	h.ok("p0", "k1", "A", 10, 50, 201, resp("r1"), effect("e1"), replayed)
	h.ok("p0", "k1", "B", 20, 30, 422, problemType("idempotency-key-reused"))
	effects = append(effects, eff("e1", "p0", "k1", "A"))

	// The same key for another principal is another scope.
	h.ok("p1", "k1", "A", 0, 10, 201, resp("r1b"), effect("e1b"))
	effects = append(effects, eff("e1b", "p1", "k1", "A"))

	// An indeterminate request that did execute: a later replay fills in
	// its answer.
	h.info("p0", "k2", "A", 0, 5)
	h.ok("p0", "k2", "A", 20, 30, 201, resp("r2"), effect("e2"), replayed)
	h.ok("p0", "k2", "A", 40, 50, 201, resp("r2"), effect("e2"), replayed)
	effects = append(effects, eff("e2", "p0", "k2", "A"))

	// An indeterminate request that did not: the retry executes.
	h.info("p0", "k3", "A", 0, 5)
	h.ok("p0", "k3", "A", 20, 30, 201, resp("r3"), effect("e3"))
	effects = append(effects, eff("e3", "p0", "k3", "A"))

	// In flight while the first runs; outcome unknown, then a retry after
	// the lease executes; a store outage after completion.
	h.ok("p0", "k4", "A", 0, 100, 201, resp("r4"), effect("e4"))
	h.ok("p0", "k4", "A", 10, 20, 409, problemType("request-in-flight"))
	h.ok("p0", "k4", "A", 110, 120, 503, problemType("store-unavailable"))
	h.ok("p0", "k4", "A", 130, 140, 201, resp("r4"), effect("e4"), replayed)
	effects = append(effects, eff("e4", "p0", "k4", "A"))

	h.info("p0", "k5", "A", 0, 5)
	h.ok("p0", "k5", "A", 10, 20, 409, problemType("outcome-unknown"))
	h.ok("p0", "k5", "A", 30, 40, 201, resp("r5"), effect("e5"))
	effects = append(effects, eff("e5", "p0", "k5", "A"))

	// Never delivered, then delivered; an upstream 500 released the claim.
	h.fail("p0", "k6", "A", 0, 1)
	h.ok("p0", "k6", "A", 2, 3, 500)
	h.ok("p0", "k6", "A", 4, 9, 201, resp("r6"), effect("e6"))
	effects = append(effects, eff("e6", "p0", "k6", "A"))

	// The other body won the race: the main body is the conflict.
	h.ok("p0", "k7", "B", 0, 10, 201, resp("r7"), effect("e7"))
	h.ok("p0", "k7", "A", 20, 30, 422, problemType("idempotency-key-reused"))
	effects = append(effects, eff("e7", "p0", "k7", "B"))

	// A response too large to keep, then its marker.
	h.ok("p0", "k8", "A", 0, 10, 201, resp("r8"), effect("e8"))
	h.ok("p0", "k8", "A", 20, 30, 409, problemType("response-not-stored"))
	effects = append(effects, eff("e8", "p0", "k8", "A"))
	effects = append(effects, Effect{Kind: KindAbsorbed, ID: "e8", Principal: "p0", Key: "k8", BodyHash: "A"})

	// Behind a proxy, over an idempotent upstream: the gateway timed out
	// but the upstream charged; after the lease the retry is forwarded and
	// the upstream's replay passes through.
	h.ok("p0", "k9", "A", 0, 10, 504)
	h.ok("p0", "k9", "A", 20, 30, 409, problemType("outcome-unknown"))
	h.ok("p0", "k9", "A", 40, 50, 201, resp("r9"), effect("e9"), replayed)
	effects = append(effects, eff("e9", "p0", "k9", "A"))

	rep := CheckRecords(h.recs, effects, nil)
	if !rep.OK() {
		t.Fatalf("false alarm:\n%s", reportText(rep))
	}
	if rep.LinChecked != 10 || rep.Effects != 10 || rep.Absorbed != 1 {
		t.Fatalf("LinChecked %d, Effects %d, Absorbed %d; want 10, 10, 1", rep.LinChecked, rep.Effects, rep.Absorbed)
	}
}

// TestCheckCatches crafts one history per violation. Each asserts that
// the targeted check reports it, so it fails without that check; "only"
// cases are caught by no other check either.
func TestCheckCatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		build func(h *histBuilder) []Effect
		want  string
		only  bool
	}{
		{
			name: "DuplicateEffect",
			build: func(h *histBuilder) []Effect {
				// The first attempt's answer was lost but it executed; the
				// retry executed again.
				h.info("p0", "k", "A", 0, 5)
				h.ok("p0", "k", "A", 10, 20, 201, resp("r2"), effect("e2"))
				return []Effect{eff("e1", "p0", "k", "A"), eff("e2", "p0", "k", "A")}
			},
			want: CheckDuplicateEffect, only: true,
		},
		{
			name: "LostEffect",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				return nil
			},
			want: CheckLostEffect, only: true,
		},
		{
			name: "LostEffectWithoutEffectID",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 200, resp("r1"))
				return nil
			},
			want: CheckLostEffect, only: true,
		},
		{
			name: "ReplayMismatch",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k", "A", 20, 30, 201, resp("r2"), effect("e1"), replayed)
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckReplayMismatch,
		},
		{
			name: "ReplayStatusMismatch",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k", "A", 20, 30, 200, resp("r1"), effect("e1"), replayed)
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckReplayMismatch,
		},
		{
			name: "CrossPrincipal",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p1", "k", "A", 20, 30, 201, resp("r1"), effect("e1"), replayed)
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckCrossPrincipal,
		},
		{
			name: "CrossKey",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k1", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k2", "A", 20, 30, 201, resp("r1"), effect("e1"))
				return []Effect{eff("e1", "p0", "k1", "A"), eff("e2", "p0", "k2", "A")}
			},
			want: CheckCrossKey,
		},
		{
			name: "ConflictReplayed",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k", "B", 20, 30, 201, resp("r1"), effect("e1"), replayed)
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckConflictAccepted,
		},
		{
			name: "NonTerminalInFlight",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 409, problemType("request-in-flight"))
				return nil
			},
			want: CheckNonTerminal, only: true,
		},
		{
			name: "NonTerminalTransport",
			build: func(h *histBuilder) []Effect {
				h.fail("p0", "k1", "A", 0, 10)
				h.info("p0", "k2", "A", 0, 10)
				h.invoke("p0", "k3", "A", 0) // the recorder died
				return nil
			},
			want: CheckNonTerminal, only: true,
		},
		{
			name: "NonTerminalAfterAnswer",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k", "A", 20, 30, 503, problemType("store-unavailable"))
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckNonTerminal, only: true,
		},
		{
			name: "NotLinearizableReplayBeforeExecution",
			build: func(h *histBuilder) []Effect {
				// A replay answered before the execution was even sent.
				h.ok("p0", "k", "A", 0, 5, 201, resp("r1"), effect("e1"), replayed)
				h.ok("p0", "k", "A", 10, 20, 201, resp("r1"), effect("e1"))
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckLinearizability, only: true,
		},
		{
			name: "NotLinearizableInFlightAfterCompletion",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k", "A", 20, 30, 409, problemType("request-in-flight"))
				h.ok("p0", "k", "A", 40, 50, 201, resp("r1"), effect("e1"), replayed)
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckLinearizability, only: true,
		},
		{
			name: "NotLinearizableSameBodyRefused",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				h.ok("p0", "k", "A", 20, 30, 422, problemType("idempotency-key-reused"))
				return []Effect{eff("e1", "p0", "k", "A")}
			},
			want: CheckLinearizability, only: true,
		},
		{
			name: "UnexpectedEffect",
			build: func(h *histBuilder) []Effect {
				h.ok("p0", "k", "A", 0, 10, 201, resp("r1"), effect("e1"))
				return []Effect{eff("e1", "p0", "k", "A"), eff("e9", "p0", "never-sent", "A")}
			},
			want: CheckUnexpectedEffect, only: true,
		},
		{
			name: "Malformed",
			build: func(h *histBuilder) []Effect {
				h.complete(42, TypeOK, "p0", "k", "A", 10, withStatus(201))
				return nil
			},
			want: CheckMalformed, only: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h histBuilder
			effects := tt.build(&h)
			rep := CheckRecords(h.recs, effects, nil)
			if !rep.Has(tt.want) {
				t.Fatalf("%s not reported:\n%s", tt.want, reportText(rep))
			}
			if got := checkedKinds(rep); tt.only && !slices.Equal(got, []string{tt.want}) {
				t.Fatalf("violations %v, want only %s:\n%s", got, tt.want, reportText(rep))
			}
			if text := reportText(rep); !strings.Contains(text, "["+tt.want+"]") || !strings.Contains(text, "FAIL") {
				t.Fatalf("report does not name the violation:\n%s", text)
			}
		})
	}
}

// TestCheckProxied: behind a proxy, a deduplicating ledger's absorbed
// delivery is a repeated forward, legal only after an indeterminate outcome.
func TestCheckProxied(t *testing.T) {
	t.Parallel()
	absorbed := func(k string) Effect {
		return Effect{Kind: KindAbsorbed, ID: "e-" + k, Principal: "p0", Key: k, BodyHash: "A"}
	}
	var h histBuilder
	// Settled, then forwarded again: a proxy bug that the ledger's own
	// replay hides from every other check.
	h.ok("p0", "settled", "A", 0, 10, 201, resp("r1"), effect("e-settled"))
	h.ok("p0", "settled", "A", 20, 30, 201, resp("r1"), effect("e-settled"), replayed)
	// The first attempt timed out: forwarding again is the contract.
	h.info("p0", "timedout", "A", 0, 5)
	h.ok("p0", "timedout", "A", 20, 30, 201, resp("r2"), effect("e-timedout"))
	effects := []Effect{
		eff("e-settled", "p0", "settled", "A"), absorbed("settled"),
		eff("e-timedout", "p0", "timedout", "A"), absorbed("timedout"),
	}
	rep := CheckRecords(h.recs, effects, &CheckConfig{Proxied: true})
	if got := checkedKinds(rep); !slices.Equal(got, []string{CheckRedelivered}) ||
		rep.Counts[CheckRedelivered] != 1 || rep.Violations[0].Key != "settled" {
		t.Fatalf("violations %v, want redelivered for key settled only:\n%s", got, reportText(rep))
	}
	if rep := CheckRecords(h.recs, effects, nil); rep.Has(CheckRedelivered) {
		t.Fatalf("redelivered reported without Proxied:\n%s", reportText(rep))
	}
}

func TestCheckAllowNonTerminal(t *testing.T) {
	t.Parallel()
	var h histBuilder
	h.ok("p0", "k", "A", 0, 10, 409, problemType("request-in-flight"))
	if rep := CheckRecords(h.recs, nil, &CheckConfig{AllowNonTerminal: true}); !rep.OK() {
		t.Fatalf("AllowNonTerminal still reports:\n%s", reportText(rep))
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		slug   string
		want   bool
	}{
		{200, "", true}, {201, "", true}, {302, "", true}, {400, "idempotency-key-invalid", true},
		{422, "idempotency-key-reused", true}, {404, "", true},
		{409, "request-in-flight", false}, {409, "outcome-unknown", false}, {409, "response-not-stored", true},
		{409, "", false}, {408, "", false}, {425, "", false}, {429, "", false},
		{500, "", false}, {502, "", false}, {503, "store-unavailable", false},
	}
	for _, tt := range tests {
		if got := Terminal(tt.status, problemBase+tt.slug); got != tt.want {
			t.Errorf("Terminal(%d, %s) = %v, want %v", tt.status, tt.slug, got, tt.want)
		}
	}
}
