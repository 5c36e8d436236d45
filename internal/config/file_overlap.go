package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// overlaps reports pipelines of one file that would get in each other's
// way: two reading one slot (slot names are per server, so the same slot
// name on the same server is one slot, whichever the database), two
// exactly-once pipelines sharing a transactional id (each would fence the
// other's producer), and two databases named as one source (consumers
// would deduplicate one's events away as the other's). Servers are compared by the host names and ports the
// connection strings give: two names for one server are not caught.
func overlaps(ps []Pipeline, sections []section) []error {
	var errs []error
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			a, b := &ps[i].Config, &ps[j].Config
			both := sections[i].label + " and " + sections[j].label
			if a.Stream.Slot == b.Stream.Slot {
				if server, dbA, dbB, ok := sameServer(a.Stream.DatabaseURL, b.Stream.DatabaseURL); ok {
					if dbA == dbB {
						errs = append(errs, fmt.Errorf("%s: both read slot %s of database %s on %s: a slot has one reader at a time; give each pipeline its own slot",
							both, a.Stream.Slot, dbA, server))
					} else {
						errs = append(errs, fmt.Errorf("%s: both use slot %s on %s (databases %s and %s): slot names are per server; give each pipeline its own slot",
							both, a.Stream.Slot, server, dbA, dbB))
					}
				}
			}
			if a.Stream.Source != "" && a.Stream.Source == b.Stream.Source {
				if _, dbA, dbB, ok := sameServer(a.Stream.DatabaseURL, b.Stream.DatabaseURL); !ok || dbA != dbB {
					errs = append(errs, fmt.Errorf("%s: both name source %s from different databases: consumers deduplicating on source and id would take one's events for the other's; give each database its own",
						both, strconv.Quote(a.Stream.Source)))
				}
			}
			if a.Delivery == DeliveryExactlyOnce && b.Delivery == DeliveryExactlyOnce &&
				a.Txn.TransactionalID != "" && a.Txn.TransactionalID == b.Txn.TransactionalID {
				errs = append(errs, fmt.Errorf("%s: both deliver exactly-once with transactional-id %s: each would fence the other's Kafka producer; give each pipeline its own",
					both, strconv.Quote(a.Txn.TransactionalID)))
			}
		}
	}
	return errs
}

// sameServer reports whether two connection strings name a server in
// common (a host and port of one is a host and port of the other), which
// it returns with each string's database. A string that does not parse
// (already reported) shares nothing.
func sameServer(a, b string) (server, dbA, dbB string, ok bool) {
	ca, msgA := parseDatabase(a)
	cb, msgB := parseDatabase(b)
	if a == "" || b == "" || msgA != "" || msgB != "" {
		return "", "", "", false
	}
	inB := serverAddrs(cb)
	for _, h := range serverAddrs(ca) {
		if slices.Contains(inB, h) {
			return h, ca.Database, cb.Database, true
		}
	}
	return "", "", "", false
}

// serverAddrs is every host:port a connection may go to, host names in
// lower case.
func serverAddrs(c *pgconn.Config) []string {
	addr := func(host string, port uint16) string { return strings.ToLower(host) + ":" + strconv.Itoa(int(port)) }
	out := []string{addr(c.Host, c.Port)}
	for _, fb := range c.Fallbacks {
		out = append(out, addr(fb.Host, fb.Port))
	}
	return out
}
