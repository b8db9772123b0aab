package workflow

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// Webhook is an ENTRY_POINT's signed webhook trigger: POSTs to the
// application's hook of the workflow, signed with one of its secrets in
// the scheme (package signature), start runs whose identity is the
// event's id, so a redelivered event is the same run.
type Webhook struct {
	// Scheme is "idem" or "standard" (Standard Webhooks).
	Scheme string
	// Secrets are the names of the application's secrets that may sign
	// (the first one for new senders, the others while one is rotated out).
	Secrets []string
}

// Webhook returns the workflow's webhook trigger, or nil when it has none.
func (w *Workflow) Webhook() *Webhook { return w.webhook }

var secretNamePattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// ValidSecretName reports whether name may name an application's secret:
// 1 to 64 letters, digits and '_', as "{{ secrets.NAME }}" reads it.
func ValidSecretName(name string) bool { return secretNamePattern.MatchString(name) }

// webhookConfig reads an ENTRY_POINT's webhook: {"scheme", "secrets"}.
func (c *compiler) webhookConfig(at string, raw json.RawMessage) *Webhook {
	var cfg map[string]json.RawMessage
	if !c.probs.decode(at, raw, &cfg, `must be an object: {"scheme": "idem" or "standard", "secrets": [secret names]}`) {
		return nil
	}
	c.probs.unknown(at, cfg, "scheme", "secrets")
	h := &Webhook{Scheme: "standard"}
	if c.probs.decode(at+"/scheme", cfg["scheme"], &h.Scheme, "must be a string") && h.Scheme != "idem" && h.Scheme != "standard" {
		c.probs.add(at+"/scheme", "%q: standard (Standard Webhooks, the default) or idem", h.Scheme)
	}
	if !c.probs.decode(at+"/secrets", cfg["secrets"], &h.Secrets, "must be a list of the application's secret names") || len(h.Secrets) == 0 {
		c.probs.add(at+"/secrets", "a webhook needs the names of the secrets that sign it")
		return nil
	}
	for i, name := range h.Secrets {
		p := fmt.Sprintf("%s/secrets/%d", at, i)
		switch {
		case !ValidSecretName(name):
			c.probs.add(p, "%q: a secret's name, 1 to 64 letters, digits and '_'", name)
		case c.opts.Secrets != nil && !slices.Contains(c.opts.Secrets, name):
			c.probs.add(p, "no secret %q in this application", name)
		}
	}
	return h
}
