package signature_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/signature"
)

// A sender signs with the idem scheme; the receiver, holding the new and
// the old secret during a rotation, verifies the raw body.
func Example() {
	clock := func() time.Time { return time.Unix(1_700_000_000, 0) }
	body := []byte(`{"order":42,"status":"PAID"}`)

	s, err := signature.NewSigner(signature.SchemeIdem, []string{"old-secret-0123456789"}, &signature.Config{Now: clock})
	if err != nil {
		panic(err)
	}
	h, err := s.Sign(body, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(signature.HeaderIdemSignature+":", h.Get(signature.HeaderIdemSignature))

	v, err := signature.NewVerifier(signature.SchemeIdem,
		[]string{"new-secret-0123456789", "old-secret-0123456789"}, &signature.Config{Now: clock})
	if err != nil {
		panic(err)
	}
	fmt.Println("verify:", v.Verify(h, body))

	err = v.Verify(h, []byte(`{"order":42,"status":"PAIDX"}`))
	fmt.Println("changed body is a bad signature:", errors.Is(err, signature.ErrBadSignature))

	_, err = signature.NewVerifier(signature.SchemeIdem, []string{"short"}, nil)
	fmt.Println(err)
	// Output:
	// Idem-Signature: t=1700000000,v1=d4ca2ce92fbab84b62b217736069b090e39b10a2e5bf1907f69f8a2acac347de
	// verify: <nil>
	// changed body is a bad signature: true
	// secret 1 of 1: signature: unusable secret: 5 bytes, want at least 16
}
