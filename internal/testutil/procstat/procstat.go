// Package procstat reads a process's memory figures from /proc, for the
// measurements that report resident memory (the inbox and outbox backlogs,
// a proxy under hostile clients).
package procstat

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
)

// RSSMiB returns this process's resident set size (VmRSS) in MiB. Linux
// only.
func RSSMiB() (float64, error) { return read("/proc/self/status", "VmRSS:") }

// PidRSSMiB returns process pid's resident set size (VmRSS) in MiB. Linux
// only.
func PidRSSMiB(pid int) (float64, error) {
	return read("/proc/"+strconv.Itoa(pid)+"/status", "VmRSS:")
}

// PidPeakRSSMiB returns the highest resident set size process pid has had
// (VmHWM) in MiB. Linux only.
func PidPeakRSSMiB(pid int) (float64, error) {
	return read("/proc/"+strconv.Itoa(pid)+"/status", "VmHWM:")
}

func read(path, field string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
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
	return 0, errors.New("procstat: no " + field + " in " + path)
}
