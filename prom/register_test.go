package prom

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	c := func() prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	}
	if err := register(nil, "inbox", "Processor", c()); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("nil registry: %v, want ErrBadConfig", err)
	}
	reg := prometheus.NewRegistry()
	if err := register(reg, "inbox", "Processor", c()); err != nil {
		t.Fatal(err)
	}
	err := register(reg, "inbox", "Processor", c())
	if !errors.Is(err, ErrAlreadyRegistered) || !strings.Contains(err.Error(), "give each Processor its own registry") {
		t.Fatalf("second registration: %v", err)
	}
}
