// Package promreg registers a component's Prometheus collectors, with the
// one error users meet: two components of one kind on one registry.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers cs on reg (nothing when reg is nil). When reg already
// holds one of them, the error says so in the words of pkg ("inbox") and
// kind ("Processor"): give each one its own registry.
func Register(reg prometheus.Registerer, pkg, kind string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return fmt.Errorf("%s: Config.Registerer already holds the %s's metrics: give each %s its own registry", pkg, pkg, kind)
			}
			return fmt.Errorf("%s: registering metrics: %w", pkg, err)
		}
	}
	return nil
}
