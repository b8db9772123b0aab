package promreg

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	c := func() prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	}
	if err := Register(nil, "inbox", "Processor", c()); err != nil {
		t.Fatalf("nil registry: %v", err)
	}
	reg := prometheus.NewRegistry()
	if err := Register(reg, "inbox", "Processor", c()); err != nil {
		t.Fatal(err)
	}
	err := Register(reg, "inbox", "Processor", c())
	if err == nil || !strings.Contains(err.Error(), "give each Processor its own registry") {
		t.Fatalf("second registration: %v", err)
	}
}
