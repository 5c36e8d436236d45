package config

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
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

// errDatabaseURLAmbiguous explains a URL that parses, but not as meant:
// pgconn (like libpq) ends the user-info at the first '@', so an unencoded
// '@' in the password (postgres://app:top@SECRET@host/db) makes the rest of
// the password the host, which every log line, retry warning and error
// would then show. Nothing of the string is quoted.
const errDatabaseURLAmbiguous = "is ambiguous: the user name and password end at the first '@', and another '@' follows before the path (or a '?' precedes it, or a host has one), " +
	"so part of the password would be read as the host (not shown: it may hold a password); " +
	"in a URL, percent-encode special characters of the user name and password: @ as %40, ? as %3F, # as %23, % as %25, / as %2F, space as %20"

// parseDatabase parses conn with the parser that connects
// (pgconn.ParseConfig) and refuses what it would misread: the message
// (errDatabaseURLSyntax or errDatabaseURLAmbiguous) quotes nothing of conn.
func parseDatabase(conn string) (*pgconn.Config, string) {
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return nil, errDatabaseURLSyntax
	}
	if urlUserInfoAmbiguous(conn) {
		return nil, errDatabaseURLAmbiguous
	}
	bad := strings.Contains(cfg.Host, "@")
	for _, fb := range cfg.Fallbacks {
		bad = bad || strings.Contains(fb.Host, "@")
	}
	if bad {
		return nil, errDatabaseURLAmbiguous
	}
	return cfg, ""
}

// urlUserInfoAmbiguous reports whether conn is a URL whose user-info pgconn
// may not end where its author meant. pgconn takes everything up to the
// first '@' before the first '/' as the user-info, so before that '/' there
// must be at most one '@', and no '?' before it (the '@' would then be a
// query value's, or the password holds a '?': either way unclear). A URL
// without a path whose query holds an '@' is refused too: it cannot be
// told from a password holding '@' and '?'; and one whose path holds an
// '@' while no '@' comes before it: a password holding '/'.
func urlUserInfoAmbiguous(conn string) bool {
	rest, ok := strings.CutPrefix(conn, "postgresql://")
	if !ok {
		if rest, ok = strings.CutPrefix(conn, "postgres://"); !ok {
			return false // keyword/value: quoting delimits every value
		}
	}
	authority, path, _ := strings.Cut(rest, "/")
	at := strings.IndexByte(authority, '@')
	if at < 0 {
		// No user-info before the first '/', but an '@' after it: a
		// password holding '/' (postgres://app:12/secret@host/db) that
		// pgconn reads as host app, port 12 and database secret@host/db.
		// An '@' in a database name is written %40.
		path, _, _ = strings.Cut(path, "?")
		return strings.Contains(path, "@")
	}
	return strings.Count(authority, "@") > 1 || strings.IndexByte(authority[:at], '?') >= 0
}

// DescribeDatabase tells which database a connection string points at
// without showing any secret: host(s), port, database and user, read with
// the same parser that connects (pgconn.ParseConfig). A string that does
// not parse, or that parses ambiguously (parseDatabase: an unencoded '@'
// in the password would show its tail as the host), is described by a
// constant. Nothing else of the string (its password, sslpassword, or
// anything the parser did not understand) is ever shown.
func DescribeDatabase(conn string) string {
	if conn == "" {
		return ""
	}
	cfg, msg := parseDatabase(conn)
	if msg == errDatabaseURLAmbiguous {
		return "(connection string not shown: it is ambiguous)"
	}
	if msg != "" {
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

// SettingsFingerprint stands for a pipeline's settings among the flags fs
// holds, the process's left out, each as the startup dump shows it
// (Dump: secrets left out or redacted), so that it may be shown to the
// database (slot.AppName): two processes whose fingerprints differ run
// other settings, and their startup logs say which.
func SettingsFingerprint(fs *flag.FlagSet) string {
	show := map[string]func(string) string{}
	for _, f := range flags() {
		if !f.process {
			show[f.name] = f.show
		}
	}
	h := sha256.New()
	fs.VisitAll(func(f *flag.Flag) {
		s, ok := show[f.Name]
		if !ok {
			return // a process setting, or a command's own flag
		}
		v := f.Value.String()
		if s != nil {
			v = s(v)
		}
		fmt.Fprintf(h, "%s=%q\n", f.Name, v)
	})
	return hex.EncodeToString(h.Sum(nil)[:4])
}
