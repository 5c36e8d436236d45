package slot

import (
	"strconv"
	"strings"
)

// AppName is how outboxd names its connections to PostgreSQL
// (application_name, shown by pg_stat_activity and pg_stat_replication):
// "outboxd", the pipeline's name and the replica's number where there
// are some, and the fingerprint of the pipeline's settings, as in
// "outboxd/orders/1 #3a9c1e2b". An operator sees which pipeline and
// replica holds a slot; a standby reads its slot holder's name to tell
// whether that process runs the same settings (SameSettings). A database
// URL that sets application_name keeps its own.
type AppName struct {
	// Pipeline is the pipeline's name in a pipelines file; "" for `run`
	// without one.
	Pipeline string
	// Replica is the replica's number; -1 when the process is not one of
	// several replicas.
	Replica int
	// Settings is the fingerprint of the pipeline's settings, secrets
	// left out; "" for none.
	Settings string
}

// appNamePrefix starts every name outboxd gives its connections.
const appNamePrefix = "outboxd"

// maxAppName is the longest application_name PostgreSQL keeps
// (NAMEDATALEN-1 bytes); it cuts a longer one.
const maxAppName = 63

// String is the name: the pipeline's name is shortened where the whole
// would be longer than PostgreSQL keeps, so the replica and the
// fingerprint always survive.
func (n AppName) String() string {
	tail := ""
	if n.Replica >= 0 {
		tail = "/" + strconv.Itoa(n.Replica)
	}
	if n.Settings != "" {
		tail += " #" + n.Settings
	}
	head := appNamePrefix
	if n.Pipeline != "" {
		head += "/" + n.Pipeline
	}
	if over := len(head) + len(tail) - maxAppName; over > 0 {
		head = head[:max(len(appNamePrefix), len(head)-over)]
	}
	return head + tail
}

// ParseAppName reads a name String made; ok is false for any other
// application_name (a URL's own, another program's, a name cut short).
func ParseAppName(s string) (n AppName, ok bool) {
	rest, ok := strings.CutPrefix(s, appNamePrefix)
	if !ok {
		return AppName{}, false
	}
	if i := strings.LastIndex(rest, " #"); i >= 0 {
		rest, n.Settings = rest[:i], rest[i+2:]
	}
	n.Replica = -1
	if rest == "" {
		return n, true
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if !strings.HasPrefix(rest, "/") || len(parts) > 2 || parts[0] == "" {
		return AppName{}, false
	}
	n.Pipeline = parts[0]
	if len(parts) == 2 {
		r, err := strconv.Atoi(parts[1])
		if err != nil || r < 0 {
			return AppName{}, false
		}
		n.Replica = r
	}
	return n, true
}

// SameSettings reports whether the application_names of two connections
// say they run the same settings: false only when both are outboxd's and
// both carry a fingerprint, and those differ.
func SameSettings(a, b string) bool {
	na, okA := ParseAppName(a)
	nb, okB := ParseAppName(b)
	return !okA || !okB || na.Settings == "" || nb.Settings == "" || na.Settings == nb.Settings
}
