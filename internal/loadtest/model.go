package loadtest

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// The per-scope model checked with porcupine: a register holding the scope's
// stored response. It starts empty; the first execution fills it with its
// fingerprint (body hash), status and response hash; a replay reads it.
// Linearization point of an execution: the moment the response is stored.
//
// Each operation's output is classified (see classify) into one of the
// opKinds below, with these sequential rules:
//
//	exec        empty → filled with (body, status, resp); filled → illegal
//	replay      filled, same body, same status and resp (or fills in the
//	            status and resp if an unknown op filled it); else illegal
//	notStored   409 response-not-stored: filled with the same body; else illegal
//	conflict    422 idempotency-key-reused: empty (another body is in flight)
//	            or filled with another body; illegal if filled with this body
//	busy        409 in flight or outcome unknown, 408, 425, 429: nothing
//	            stored yet, so empty; illegal once filled
//	noop        400 bad key, 413: any state, no change
//	unknown     info, an invoke never completed, or any 5xx: may have
//	            executed (empty → filled with this body, response unknown)
//	            or not, at any time after its call (its return is +∞)
//
// 5xx answers count as unknown because a gateway's 502 or 504 (or a 503
// after a lost store write) may follow an upstream that did act, and that
// upstream may still act after the client gave up. Operations that failed
// before sending (fail) are left out.
type opKind uint8

const (
	kindExec opKind = iota
	kindReplay
	kindNotStored
	kindConflict
	kindBusy
	kindNoop
	kindUnknown
)

func (k opKind) String() string {
	return [...]string{"exec", "replay", "not-stored", "conflict", "busy", "noop", "unknown"}[k]
}

// classify maps an operation's completion (nil while open) to its kind.
func classify(r *Record) opKind {
	if r == nil || r.Type != TypeOK || r.Status >= 500 {
		return kindUnknown
	}
	s := slug(r.ProblemType)
	switch {
	case r.Replayed:
		return kindReplay
	case r.Status == 409 && s == "response-not-stored":
		return kindNotStored
	case r.Status == 422 && s == "idempotency-key-reused":
		return kindConflict
	case s == "idempotency-key-missing", s == "idempotency-key-invalid", s == "body-too-large":
		return kindNoop
	case !Terminal(r.Status, r.ProblemType):
		return kindBusy
	default:
		return kindExec
	}
}

type linInput struct{ body string }

type linOutput struct {
	kind   opKind
	status int
	resp   string
}

type linState struct {
	filled bool
	body   string
	known  bool // status and resp are known
	status int
	resp   string
}

// registerModel returns the model, built fresh so that no state is shared.
func registerModel() porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Init: func() []any { return []any{linState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(linState), input.(linInput), output.(linOutput)
			switch out.kind {
			case kindUnknown:
				if !s.filled {
					return []any{s, linState{filled: true, body: in.body}}
				}
				return []any{s}
			case kindExec:
				if !s.filled {
					return []any{linState{filled: true, body: in.body, known: true, status: out.status, resp: out.resp}}
				}
			case kindReplay:
				if s.filled && s.body == in.body {
					if !s.known {
						return []any{linState{filled: true, body: s.body, known: true, status: out.status, resp: out.resp}}
					}
					if s.status == out.status && s.resp == out.resp {
						return []any{s}
					}
				}
			case kindNotStored:
				if s.filled && s.body == in.body {
					return []any{s}
				}
			case kindConflict:
				if !s.filled || s.body != in.body {
					return []any{s}
				}
			case kindBusy:
				if !s.filled {
					return []any{s}
				}
			case kindNoop:
				return []any{s}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			return fmt.Sprintf("%s body=%s -> %d %s", out.kind, short(in.body), out.status, short(out.resp))
		},
		DescribeState: func(state any) string {
			s := state.(linState)
			if !s.filled {
				return "empty"
			}
			return fmt.Sprintf("body=%s %d %s", short(s.body), s.status, short(s.resp))
		},
	}).ToModel()
}

func short(h string) string {
	if len(h) > 8 {
		return h[:8]
	}
	return h
}
