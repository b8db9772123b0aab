package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/idemhq/idem/keytemplate"
)

// ConnectionKind is the store.DefinitionKey.Kind of stored connections.
const ConnectionKind = "connection"

// Connection is a named target of an application's GATEWAY steps: a base
// URL, default headers and auth, the key template, the response policy
// and the verify read of one API, written once. A step names it and a
// path, and inherits the rest, its key template included: a step that
// calls the payments API cannot forget its key. What the step says itself
// wins.
//
//	{"baseUrl": "https://api.payments.example",
//	 "auth": {"type": "bearer", "token": "{{ secrets.PAYMENTS_KEY }}"},
//	 "headers": {"Accept": "application/json"},
//	 "idempotencyKey": "= payload.order.id",
//	 "onConflict": "done", "clientErrorMode": "fail",
//	 "verify": {"path": "= '/orders/' & payload.order.id", "found": "= response.status = 200"}}
//
// The key template's operation is its leading literal or, without one,
// the id of the vertex that sends it: "= payload.order.id" sends
// "charge-o-1" from the vertex charge and "refund-o-1" from refund.
type Connection struct {
	base            string
	headers         map[string]*value
	key             string
	onConflict      string
	clientErrorMode string
	verify          *verify
}

// LoadConnection parses a connection (JSON or YAML) and checks it against
// opts (its secrets), and returns it with its canonical form (as Load);
// or an *InvalidError (ErrInvalid) listing every problem.
func LoadConnection(data []byte, opts *Options) (*Connection, []byte, error) {
	top, err := document(data)
	if err != nil {
		return nil, nil, err
	}
	c := compiler{opts: opts, w: &Workflow{}}
	if c.opts == nil {
		c.opts = &Options{}
	}
	c.probs.unknown("", top, "baseUrl", "headers", "auth", "idempotencyKey", "onConflict", "clientErrorMode", "verify")
	conn := &Connection{}
	if c.probs.decode("/baseUrl", top["baseUrl"], &conn.base, "must be a string") {
		u, err := url.Parse(conn.base)
		switch {
		case conn.base == "":
			c.probs.add("/baseUrl", "a connection needs its API's base URL")
		case secretPattern.MatchString(conn.base):
			c.probs.add("/baseUrl", "secrets go in headers or auth only, never in a url (urls are logged and stored)")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
			c.probs.add("/baseUrl", "%q: an absolute http or https URL without query or fragment", conn.base)
		}
		conn.base = strings.TrimRight(conn.base, "/")
	}
	conn.headers, _ = c.headers("/headers", "", top["headers"], false)
	if raw, ok := top["auth"]; ok {
		name, v := c.auth(raw)
		if name != "" {
			if conn.headers == nil {
				conn.headers = map[string]*value{}
			}
			conn.headers[name] = v
		}
	}
	if c.probs.decode("/idempotencyKey", top["idempotencyKey"], &conn.key, "must be a string: a key template") && conn.key != "" {
		c.key("/idempotencyKey", "connection", conn.key)
	}
	if c.probs.decode("/onConflict", top["onConflict"], &conn.onConflict, "must be a string") && conn.onConflict != "" && conn.onConflict != "done" && conn.onConflict != "retry" {
		c.probs.add("/onConflict", "%q: done (the default: a 409 means the target has it) or retry", conn.onConflict)
	}
	if c.probs.decode("/clientErrorMode", top["clientErrorMode"], &conn.clientErrorMode, "must be a string") && conn.clientErrorMode != "" &&
		conn.clientErrorMode != "fail" && conn.clientErrorMode != "complete" {
		c.probs.add("/clientErrorMode", "%q: fail (the default) or complete", conn.clientErrorMode)
	}
	if raw, ok := top["verify"]; ok {
		conn.verify = c.verify("/verify", "connection", "connection", raw)
	}
	if err := c.probs.err(); err != nil {
		return nil, nil, err
	}
	canon, err := canonical(top)
	if err != nil {
		return nil, nil, err
	}
	return conn, canon, nil
}

// auth reads a connection's auth: {"type": "bearer", "token"} or
// {"type": "header", "name", "value"}, as the header it sends.
func (c *compiler) auth(raw json.RawMessage) (string, *value) {
	var a map[string]json.RawMessage
	if !c.probs.decode("/auth", raw, &a, `must be an object: {"type": "bearer", "token"} or {"type": "header", "name", "value"}`) {
		return "", nil
	}
	var typ, token, name, val string
	c.probs.decode("/auth/type", a["type"], &typ, "must be a string")
	switch typ {
	case "bearer":
		c.probs.unknown("/auth", a, "type", "token")
		if !c.probs.decode("/auth/token", a["token"], &token, "must be a string") || token == "" {
			c.probs.add("/auth/token", "a bearer auth needs its token, such as \"{{ secrets.API_TOKEN }}\"")
			return "", nil
		}
		return "Authorization", c.header("/auth/token", "Bearer "+token)
	case "header":
		c.probs.unknown("/auth", a, "type", "name", "value")
		c.probs.decode("/auth/name", a["name"], &name, "must be a string")
		c.probs.decode("/auth/value", a["value"], &val, "must be a string")
		if name == "" || val == "" {
			c.probs.add("/auth", "a header auth needs the header's name and value")
			return "", nil
		}
		return name, c.header("/auth/value", val)
	}
	c.probs.add("/auth/type", "%q: bearer or header", typ)
	return "", nil
}

// on returns g bound to its connection conn, for the vertex: the
// connection's base URL, its headers under the step's, its key template
// unless the step has its own (its operation the vertex's id, unless the
// template starts with one), its response policy where the step says
// nothing, its verify unless the step has its own.
func (g *gateway) on(conn *Connection, vertex string) (*gateway, error) {
	b := *g
	b.base = conn.base
	b.headers = map[string]*value{}
	for name, v := range conn.headers {
		b.headers[name] = v
	}
	for name, v := range g.headers {
		for have := range b.headers {
			if strings.EqualFold(have, name) {
				delete(b.headers, have)
			}
		}
		b.headers[name] = v
	}
	if b.key == nil && conn.key != "" {
		t, err := keytemplate.Parse("", conn.key, nil)
		if err != nil {
			t, err = keytemplate.Parse(strings.ReplaceAll(vertex, "-", "_"), conn.key, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: the connection's idempotencyKey for %q: %w", ErrData, vertex, err)
		}
		b.key = t
	}
	if !g.conflictSet && conn.onConflict != "" {
		b.onConflict = conn.onConflict
	}
	if !g.modeSet && conn.clientErrorMode != "" {
		b.clientErrorMode = conn.clientErrorMode
	}
	if b.verify == nil {
		b.verify = conn.verify
	}
	return &b, nil
}

// bound returns the GATEWAY of vertex as it runs: bound to its connection
// (Caller.Connection) when it names one.
func (g *gateway) bound(ctx context.Context, vertex string, c *Caller) (*gateway, error) {
	if g.connection == "" {
		return g, nil
	}
	if c == nil || c.Connection == nil {
		return nil, fmt.Errorf("%w: %q names the connection %q, and this runner has none", ErrData, vertex, g.connection)
	}
	conn, err := c.Connection(ctx, g.connection)
	if err != nil {
		return nil, fmt.Errorf("the connection %q of %q: %w", g.connection, vertex, err)
	}
	return g.on(conn, vertex)
}
