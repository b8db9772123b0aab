package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ledgerSetup starts a ledger on a free port, closed at cleanup.
func ledgerSetup(t *testing.T, cfg LedgerConfig) *Ledger {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	l, err := StartLedger(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close ledger: %v", err)
		}
	})
	return l
}

type answer struct {
	status   int
	body     []byte
	replayed bool
	effect   string
}

// post sends a charge on its own connection (closed after), so that no
// idle connection outlives the test.
func post(t *testing.T, url, principal, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/charge", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	req.Header.Set("Authorization", "Bearer "+principal)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	var la ledgerAnswer
	if json.Unmarshal(b, &la) == nil {
		a.effect = la.EffectID
	}
	return a
}

func countKind(effects []Effect, kind string) int {
	n := 0
	for _, e := range effects {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func TestLedger(t *testing.T) {
	t.Parallel()

	t.Run("Dedup", func(t *testing.T) {
		t.Parallel()
		l := ledgerSetup(t, LedgerConfig{Dedup: true})
		first := post(t, l.URL(), "p0", "k1", `{"a":1}`)
		again := post(t, l.URL(), "p0", "k1", `{"a":1}`)
		other := post(t, l.URL(), "p0", "k1", `{"a":2}`)
		otherPrincipal := post(t, l.URL(), "p1", "k1", `{"a":1}`)
		if first.status != 201 || first.replayed || first.effect == "" {
			t.Fatalf("first: %d replayed=%v %s", first.status, first.replayed, first.body)
		}
		if again.status != 201 || !again.replayed || !bytes.Equal(again.body, first.body) {
			t.Fatalf("again: %d replayed=%v %s, want the first answer %s", again.status, again.replayed, again.body, first.body)
		}
		if other.status != 422 || !strings.Contains(string(other.body), "idempotency-key-reused") {
			t.Fatalf("other body: %d %s", other.status, other.body)
		}
		if otherPrincipal.status != 201 || otherPrincipal.replayed || otherPrincipal.effect == first.effect {
			t.Fatalf("other principal: %d replayed=%v %s", otherPrincipal.status, otherPrincipal.replayed, otherPrincipal.body)
		}
		effects := l.Effects()
		if countKind(effects, KindEffect) != 2 || countKind(effects, KindAbsorbed) != 1 {
			t.Fatalf("effects %+v, want 2 effects and 1 absorbed", effects)
		}
		if effects[0].Principal != "p0" || effects[0].Key != "k1" {
			t.Fatalf("effect %+v: principal or key not recorded", effects[0])
		}
	})

	t.Run("NoDedup", func(t *testing.T) {
		t.Parallel()
		l := ledgerSetup(t, LedgerConfig{})
		a := post(t, l.URL(), "p0", "k1", `{"a":1}`)
		b := post(t, l.URL(), "p0", "k1", `{"a":1}`)
		if a.status != 201 || b.status != 201 || b.replayed || a.effect == b.effect {
			t.Fatalf("answers %d %s / %d %s: want two distinct effects", a.status, a.body, b.status, b.body)
		}
		if n := countKind(l.Effects(), KindEffect); n != 2 {
			t.Fatalf("%d effects, want 2", n)
		}
	})

	t.Run("FailRate", func(t *testing.T) {
		t.Parallel()
		l := ledgerSetup(t, LedgerConfig{Dedup: true, FailRate: 1})
		a := post(t, l.URL(), "p0", "k1", `{}`)
		if a.status != 500 || len(l.Effects()) != 0 {
			t.Fatalf("answer %d, %d effects: want 500 and nothing recorded", a.status, len(l.Effects()))
		}
	})

	t.Run("Effects", func(t *testing.T) {
		t.Parallel()
		l := ledgerSetup(t, LedgerConfig{})
		post(t, l.URL(), "p0", "k1", `{}`)
		post(t, l.URL(), "p0", "", `{}`)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		got, err := FetchEffects(context.Background(), &http.Client{Transport: tr}, l.URL())
		if err != nil || len(got) != 2 || got[1].Key != "" || got[0].Seq != 1 || got[1].Seq != 2 {
			t.Fatalf("FetchEffects = %+v, %v", got, err)
		}
		got, err = FetchEffects(context.Background(), &http.Client{Transport: tr}, l.URL()+"/effects?format=json")
		if err != nil || len(got) != 2 {
			t.Fatalf("FetchEffects(json) = %+v, %v", got, err)
		}
	})

	t.Run("LogSurvivesRestart", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "effects.jsonl")
		l, err := StartLedger(&LedgerConfig{Listen: "127.0.0.1:0", Dedup: true, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		first := post(t, l.URL(), "p0", "k1", `{"a":1}`)
		// The answer came after the fsync: the effect is on disk even
		// though the ledger is still running.
		onDisk, err := ReadEffectsFile(log)
		if err != nil || len(onDisk) != 1 || onDisk[0].ID != first.effect {
			t.Fatalf("log before close = %+v, %v", onDisk, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l2 := ledgerSetup(t, LedgerConfig{Dedup: true, Log: log})
		again := post(t, l2.URL(), "p0", "k1", `{"a":1}`)
		next := post(t, l2.URL(), "p0", "k2", `{"a":1}`)
		if !again.replayed || !bytes.Equal(again.body, first.body) {
			t.Fatalf("after restart: %d replayed=%v %s, want %s", again.status, again.replayed, again.body, first.body)
		}
		effects := l2.Effects()
		if len(effects) != 3 || effects[2].Seq != 3 || effects[2].ID != next.effect {
			t.Fatalf("effects after restart %+v: sequence not continued", effects)
		}
	})

	t.Run("CloseCutsDelay", func(t *testing.T) {
		t.Parallel()
		inDelay := make(chan struct{})
		l, err := StartLedger(&LedgerConfig{Listen: "127.0.0.1:0", Delay: time.Hour, onDelay: func() { close(inDelay) }})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan answer, 1)
		go func() { got <- post(t, l.URL(), "p0", "k1", `{}`) }()
		<-inDelay
		start := time.Now()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if a := <-got; a.status != 503 || len(l.Effects()) != 0 {
			t.Fatalf("answer %d, %d effects: want 503 and nothing recorded", a.status, len(l.Effects()))
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Close took %v", d)
		}
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		for _, c := range []LedgerConfig{{FailRate: 2}, {Delay: -1}, {MaxBody: -1}} {
			if _, err := StartLedger(&c); err == nil {
				t.Errorf("StartLedger(%+v) accepted", c)
			}
		}
	})
}
