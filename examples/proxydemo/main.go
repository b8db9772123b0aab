// Command proxydemo is idem's main job on the embedded SQLite store, with no
// server to install: it starts a deliberately non-idempotent upstream (a
// ledger that records every call it gets as a new effect), puts the idem
// proxy in front of it, and shows what the proxy promises:
//
//  1. 16 clients send the same charge with one Idempotency-Key at once: the
//     upstream is called once; every client ends with the same answer.
//  2. A retry is replayed byte for byte with Idempotent-Replayed: true.
//  3. The same key with another body is refused: 422 idempotency-key-reused.
//  4. Another caller's identical key is another operation.
//
// It exits non-zero if the upstream ever recorded a duplicate effect. With
// --serve it keeps running so that you can try it with curl (see README).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemhq/idem/proxy"
	"github.com/idemhq/idem/store/sqlitestore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "proxydemo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("proxydemo", flag.ContinueOnError)
	serve := fs.Bool("serve", false, "keep serving after the demo, for curl")
	listen := fs.String("listen", "127.0.0.1:8081", "proxy address with --serve")
	upstreamAddr := fs.String("upstream-listen", "127.0.0.1:9000", "upstream address with --serve")
	if err := fs.Parse(args); err != nil {
		return err
	}
	proxyAddr, upAddr := "127.0.0.1:0", "127.0.0.1:0"
	if *serve {
		proxyAddr, upAddr = *listen, *upstreamAddr
	}

	dir, err := os.MkdirTemp("", "idem-proxydemo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		return err
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		return err
	}
	defer st.Close()

	// A slow upstream that records every call: duplicates would show.
	ledger, err := startLedger(upAddr)
	if err != nil {
		return err
	}
	defer ledger.Close()
	upURL, _ := url.Parse(ledger.URL())
	p, err := proxy.New(&proxy.Config{Upstream: upURL, Store: st})
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	fmt.Fprintf(out, "idem proxy on embedded SQLite (%s)\n", filepath.Join(dir, "idem.db"))
	fmt.Fprintf(out, "upstream %s records every call it gets; proxy %s\n\n", ledger.URL(), base)
	var failures []string
	fail := func(format string, a ...any) { failures = append(failures, fmt.Sprintf(format, a...)) }

	// 1. Concurrent duplicates.
	const clients = 16
	body := `{"order":"o-42","amount":1000}`
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   = map[int]int{}
		answers = map[string]int{}
		start   = make(chan struct{})
	)
	for range clients {
		wg.Go(func() {
			<-start
			for attempt := 0; ; attempt++ {
				res, err := send(ctx, base, "alice", "charge-o-42", body)
				if err != nil {
					mu.Lock()
					fail("client: %v", err)
					mu.Unlock()
					return
				}
				mu.Lock()
				if attempt == 0 {
					first[res.status]++
				}
				mu.Unlock()
				if res.status == http.StatusConflict { // in flight: retry after Retry-After
					select {
					case <-ctx.Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				mu.Lock()
				answers[fmt.Sprintf("%d %s", res.status, res.body)]++
				mu.Unlock()
				return
			}
		})
	}
	close(start)
	wg.Wait()
	fmt.Fprintf(out, "1. %d clients send POST /charges, Idempotency-Key: charge-o-42, at once\n", clients)
	fmt.Fprintf(out, "   first answers: %v (409 = in flight, retried after Retry-After)\n", first)
	for a, n := range answers {
		fmt.Fprintf(out, "   final answer x%d: %s\n", n, a)
	}
	if len(answers) != 1 {
		fail("clients ended with %d different answers", len(answers))
	}

	// 2. A later retry is replayed.
	r2, err := send(ctx, base, "alice", "charge-o-42", body)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n2. a retry: %d, Idempotent-Replayed: %s\n", r2.status, r2.replayed)
	if r2.replayed != "true" || answers[fmt.Sprintf("%d %s", r2.status, r2.body)] != clients {
		fail("the retry was not a byte-identical replay")
	}

	// 3. Same key, other body.
	r3, err := send(ctx, base, "alice", "charge-o-42", `{"order":"o-42","amount":9999}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n3. same key, other body: %d %s\n", r3.status, r3.problemType)
	if r3.status != http.StatusUnprocessableEntity {
		fail("other body answered %d, want 422", r3.status)
	}

	// 4. Another caller, same key.
	r4, err := send(ctx, base, "bob", "charge-o-42", body)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n4. bob, same key and body: %d (his own operation)\n", r4.status)
	if r4.status != http.StatusCreated || r4.replayed == "true" {
		fail("bob got %d replayed=%s, want his own 201", r4.status, r4.replayed)
	}

	effects := map[string]int{}
	for _, e := range ledger.Effects() {
		effects[e.Principal+" "+e.Key]++
	}
	fmt.Fprintf(out, "\nupstream effects: %d (", len(ledger.Effects()))
	for k, n := range effects {
		fmt.Fprintf(out, " %s=%d", k, n)
		if n != 1 {
			fail("upstream called %d times for %s", n, k)
		}
	}
	fmt.Fprintln(out, " )")
	if len(effects) != 2 {
		fail("upstream saw %d operations, want 2 (alice and bob)", len(effects))
	}
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(out, "FAIL:", f)
		}
		return errors.New("invariants broken")
	}
	fmt.Fprintln(out, "\nok: the upstream was called once per caller and key")

	if *serve {
		fmt.Fprintf(out, "\nserving until Ctrl-C; try:\n  curl -si -X POST %s/charges -H 'Authorization: Bearer alice' -H 'Idempotency-Key: k1' -d '{\"amount\":100}'\n", base)
		<-ctx.Done()
	}
	return nil
}

type answer struct {
	status      int
	body        string
	replayed    string
	problemType string
}

func send(ctx context.Context, base, user, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/charges", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+user)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: res.StatusCode, body: string(bytes.TrimSpace(b)), replayed: res.Header.Get("Idempotent-Replayed")}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		if i := strings.Index(a.body, `"type":"`); i >= 0 {
			rest := a.body[i+8:]
			a.problemType = rest[:strings.IndexByte(rest, '"')]
		}
	}
	return a, nil
}
