package workflow_test

import (
	"errors"
	"testing"

	"github.com/idemhq/idem/workflow"
)

func compiled(t *testing.T, fields any) *workflow.Workflow {
	t.Helper()
	d := checkout()
	if fields == nil {
		delete(config(d, 0), "idempotencyFields")
	} else {
		config(d, 0)["idempotencyFields"] = fields
	}
	b := mustJSON(t, d)
	def, err := workflow.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := workflow.Compile(def, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func identity(t *testing.T, w *workflow.Workflow, app, name, payload, client string) workflow.Identity {
	t.Helper()
	id, err := w.Identity(app, name, []byte(payload), client)
	if err != nil {
		t.Fatalf("Identity(%s, %q): %v", payload, client, err)
	}
	return id
}

// A trigger's identity is its payload's by default: the same data however
// it is written, another for any other data, application or workflow.
func TestIdentityOfThePayload(t *testing.T) {
	w := compiled(t, nil)
	a := identity(t, w, "shop", "checkout", `{"order": {"id": "o-1", "amount": 100}}`, "")
	if a.Source != workflow.SourcePayload {
		t.Fatalf("source %q", a.Source)
	}
	same := identity(t, w, "shop", "checkout", " {\"order\":{\"amount\":1e2,\n\"id\":\"o-1\"}} ", "")
	if same.Key != a.Key || same.Fingerprint != a.Fingerprint {
		t.Fatal("the same payload, written otherwise, is another identity")
	}
	for _, other := range []workflow.Identity{
		identity(t, w, "shop", "checkout", `{"order": {"id": "o-1", "amount": 101}}`, ""),
		identity(t, w, "other-shop", "checkout", `{"order": {"id": "o-1", "amount": 100}}`, ""),
		identity(t, w, "shop", "checkout-v2", `{"order": {"id": "o-1", "amount": 100}}`, ""),
	} {
		if other.Key == a.Key {
			t.Fatal("another payload, application or workflow shares the identity")
		}
	}
	// The empty payload is a payload (a nightly report triggered with no
	// body): every empty trigger is one run unless the caller says
	// otherwise.
	if e1, e2 := identity(t, w, "shop", "checkout", "", ""), identity(t, w, "shop", "checkout", " ", ""); e1.Key != e2.Key {
		t.Fatal("two empty payloads differ")
	}
}

// With idempotencyFields the identity is those values': another amount for
// the same order is the same identity with another fingerprint (which the
// service refuses, 422), and the fields' order does not matter.
func TestIdentityOfTheFields(t *testing.T) {
	w := compiled(t, "order.id")
	a := identity(t, w, "shop", "checkout", `{"order": {"id": "o-1", "amount": 100}}`, "")
	b := identity(t, w, "shop", "checkout", `{"order": {"id": "o-1", "amount": 999}}`, "")
	if a.Source != workflow.SourceFields || a.Key != b.Key || a.Fingerprint == b.Fingerprint {
		t.Fatalf("same order, other amount: %+v %+v", a, b)
	}
	if c := identity(t, w, "shop", "checkout", `{"order": {"id": "o-2", "amount": 100}}`, ""); c.Key == a.Key {
		t.Fatal("another order shares the identity")
	}
	// A number and a string are other values.
	if n, s := identity(t, w, "shop", "checkout", `{"order": {"id": 7}}`, ""), identity(t, w, "shop", "checkout", `{"order": {"id": "7"}}`, ""); n.Key == s.Key {
		t.Fatal("7 and \"7\" share the identity")
	}
	for _, bad := range []string{`{"order": {}}`, `{"order": {"id": "o-1", "id": "o-2"}}`, `{"order": `, ``} {
		if _, err := w.Identity("shop", "checkout", []byte(bad), ""); !errors.Is(err, workflow.ErrBadTrigger) {
			t.Errorf("payload %q: %v, want ErrBadTrigger", bad, err)
		}
	}
	w1, w2 := compiled(t, []any{"customer", "order.id"}), compiled(t, []any{"order.id", "customer"})
	p := `{"customer": "c-1", "order": {"id": "o-1"}}`
	if identity(t, w1, "shop", "checkout", p, "").Key != identity(t, w2, "shop", "checkout", p, "").Key {
		t.Fatal("the order the fields are listed in changed the identity")
	}
}

// A clientIdempotencyId wins over the fields and the payload.
func TestIdentityOfTheClient(t *testing.T) {
	w := compiled(t, "order.id")
	a := identity(t, w, "shop", "checkout", `{"order": {"id": "o-1"}}`, "run-42")
	b := identity(t, w, "shop", "checkout", `{"order": {"id": "o-2"}}`, "run-42")
	if a.Source != workflow.SourceClient || a.Key != b.Key || a.Fingerprint == b.Fingerprint {
		t.Fatalf("one client id, two orders: %+v %+v", a, b)
	}
	if c := identity(t, w, "shop", "checkout", `{"order": {"id": "o-1"}}`, "run-43"); c.Key == a.Key {
		t.Fatal("another client id shares the identity")
	}
	for _, bad := range []string{"a b", "ключ", string(make([]byte, 256))} {
		if _, err := w.Identity("shop", "checkout", []byte(`{}`), bad); !errors.Is(err, workflow.ErrBadTrigger) {
			t.Errorf("client id %q: %v, want ErrBadTrigger", bad, err)
		}
	}
}
