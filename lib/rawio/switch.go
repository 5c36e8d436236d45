package rawio

import (
	"fmt"
	"os"
	"strings"
)

// EnvVar is the environment variable that turns raw I/O off: off, false or
// 0. It is read where a connection is dialed or its socket looked up, so
// that every user of the package (the replication stream, the Kafka
// clients, the bench tools) follows one switch without being handed it.
const EnvVar = "OUTBOXD_RAW_IO"

// Enabled reports whether raw I/O is on for this process: EnvVar does not
// turn it off. It does not say whether the platform supports it (Wrap and
// SocketOf decide that per connection).
func Enabled() bool {
	on, _ := parseSwitch(os.Getenv(EnvVar))
	return on
}

// CheckEnv reports a value of EnvVar that is neither on nor off, which
// Enabled takes for on.
func CheckEnv() error {
	_, err := parseSwitch(os.Getenv(EnvVar))
	return err
}

// parseSwitch reads EnvVar's value v: on unless it says off; an error for
// a value that says neither.
func parseSwitch(v string) (on bool, err error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return true, fmt.Errorf("%s=%q: want on or off (raw I/O stays on)", EnvVar, v)
}
