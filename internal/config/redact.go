package config

import (
	"flag"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

const redacted = "xxxxx"

// errDatabaseURLSyntax explains a connection string that does not parse
// without quoting it: any part of it may be a password, and a string that
// does not parse has no reliable boundaries to redact by.
const errDatabaseURLSyntax = "does not parse as a PostgreSQL URL or keyword/value connection string (not shown: it may hold a password); " +
	"in a URL, percent-encode special characters of the password: # as %23, % as %25, @ as %40, / as %2F, space as %20"

// DescribeDatabase tells which database a connection string points at
// without showing any secret: host(s), port, database and user, read with
// the same parser that connects (pgconn.ParseConfig). A string that does
// not parse is described by a constant. Nothing else of the string (its
// password, sslpassword, or anything the parser did not understand) is
// ever shown.
func DescribeDatabase(conn string) string {
	if conn == "" {
		return ""
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return "(connection string not shown: it does not parse)"
	}
	hosts := []string{cfg.Host + ":" + strconv.Itoa(int(cfg.Port))}
	for _, fb := range cfg.Fallbacks {
		if h := fb.Host + ":" + strconv.Itoa(int(fb.Port)); h != hosts[len(hosts)-1] {
			hosts = append(hosts, h)
		}
	}
	return "host=" + strings.Join(hosts, ",") + " database=" + cfg.Database + " user=" + cfg.User
}

// Dump is the startup dump of the flags a command registered, each under
// its name in snake case, secrets left out or redacted.
func Dump(fs *flag.FlagSet) slog.Value {
	show := map[string]func(string) string{}
	for _, f := range flags() {
		show[f.name] = f.show
	}
	var attrs []slog.Attr
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if s := show[f.Name]; s != nil {
			v = s(v)
		}
		attrs = append(attrs, slog.String(strings.ReplaceAll(f.Name, "-", "_"), v))
	})
	return slog.GroupValue(attrs...)
}
