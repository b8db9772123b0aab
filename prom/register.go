package prom

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// register registers cs on reg. When reg already holds one of them, the
// error says so in the words of pkg ("inbox") and kind ("Processor"): give
// each one its own registry.
func register(reg prometheus.Registerer, pkg, kind string, cs ...prometheus.Collector) error {
	if reg == nil {
		return fmt.Errorf("%w: nil Registerer", ErrBadConfig)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return fmt.Errorf("%w: the registry already holds the %s's metrics: give each %s its own registry", ErrAlreadyRegistered, pkg, kind)
			}
			return fmt.Errorf("prom: registering the %s's metrics: %w", pkg, err)
		}
	}
	return nil
}
