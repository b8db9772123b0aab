// Package problem writes RFC 9457 problem details, the
// application/problem+json body of every error that idem's HTTP surfaces
// answer (the httpidem middleware, the proxy, the webhook receiver and its
// admin API), and holds the one catalogue of their types.
//
// A problem's type is a URI, a base (DefaultBase unless configured) followed
// by a slug: "https://idem.dev/problems/idempotency-key-reused". Clients
// match the slug, the last path segment. Each slug is declared once, here,
// with its title; the same slug means the same problem whichever surface
// answers it, and keeps its title (RFC 9457 §3.1.3). docs/http.md says which
// surface answers each, with which status, and when.
//
//	problem.Write(w, problem.DefaultBase, problem.SlugKeyReused, http.StatusUnprocessableEntity,
//		"This Idempotency-Key was used with another request.")
package problem
