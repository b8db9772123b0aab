package keytemplate_test

import (
	"errors"
	"fmt"

	"github.com/idemhq/idem/keytemplate"
)

// The charge template, as a configuration file writes it: the same intent
// gives the same key on every attempt, and a charge and a shipment of one
// order get different keys.
func Example() {
	charge, err := keytemplate.Parse("charge", "= 'charge-' & payload.order.id", nil)
	if err != nil {
		panic(err)
	}
	ship, err := keytemplate.Parse("ship", "= payload.order.id", nil)
	if err != nil {
		panic(err)
	}
	intent := []byte(`{"payload": {"order": {"id": "o-42"}}, "target": "payments"}`)
	fmt.Println(charge.Key(intent))
	fmt.Println(ship.Key(intent))

	// A missing field is an error, not the key "charge-".
	_, err = charge.Key([]byte(`{"payload": {"order": {}}}`))
	fmt.Println(err)

	// A template that reads the clock is refused when it is defined.
	_, err = keytemplate.Expr("charge", "'charge-' & payload.order.id & $millis()", nil)
	fmt.Println(errors.Is(err, keytemplate.ErrNondeterministic))
	// Output:
	// charge-o-42 <nil>
	// ship-o-42 <nil>
	// keytemplate: missing field: payload.order.id is not in the input
	// true
}

// A Go function template returns what follows the operation's prefix.
func ExampleFunc() {
	t, err := keytemplate.Func("refund", func(in map[string]any) (string, error) {
		p, _ := in["payload"].(map[string]any)
		id, ok := p["refund_id"].(string)
		if !ok {
			return "", errors.New("no refund_id")
		}
		return id, nil
	}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Key([]byte(`{"payload": {"refund_id": "r-7"}}`)))
	// Output: refund-r-7 <nil>
}
