// Package procstat reads this process's memory figures from /proc, for the
// measurements that report resident memory (the inbox and outbox backlogs).
package procstat

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
)

// RSSMiB returns the process's resident set size (VmRSS) in MiB. Linux only.
func RSSMiB() (float64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("procstat: no VmRSS in /proc/self/status")
}
