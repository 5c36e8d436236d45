package config

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFileFlags: each -file flag sets its setting from the file's
// content without the trailing newline and spaces; the file on the command
// line wins over the other flag's environment variable; giving both flags
// (or both variables) is refused; an unreadable or empty file is refused
// naming its path; and no message, nor the startup dump, shows the secret.
func TestSecretFileFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	url := write("url", "postgres://app:pg-s3cret@db:5432/app\n \n")
	badURL := write("bad-url", "postgres://app:pg-s3cret@SECOND@db/app\n")
	pw := write("pw", "kafka-s3cret\r\n")
	empty := write("empty", " \n")
	missing := filepath.Join(dir, "missing")
	sasl := []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "u"}

	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		parseErr []string // Parse's error holds these; nil: Parse succeeds
		invalid  []string // Validate's error holds these; nil: valid
		url, pw  string   // the settings read, when valid
		primary  string   // the primary URL read, when valid
		dump     []string // in the startup dump, when valid
	}{
		// Issue 52: the primary's URL (decoding on a standby) holds a
		// password as the database URL does.
		{name: "primary URL from a file", args: []string{"--database-url", "postgres://app:pg-s3cret@db:5432/app", "--primary-url-file", url},
			url: "postgres://app:pg-s3cret@db:5432/app", primary: "postgres://app:pg-s3cret@db:5432/app",
			dump: []string{"primary_url=\"host=db:5432 database=app user=app\"", "primary_url_file=" + url}},
		{name: "primary URL and its file", args: []string{"--database-url", "postgres://app@db/app", "--primary-url", "postgres://app@p/app", "--primary-url-file", url},
			invalid: []string{"--primary-url (OUTBOXD_PRIMARY_URL) and --primary-url-file (OUTBOXD_PRIMARY_URL_FILE): give one of them, not both"}},
		{name: "a primary URL that does not parse", args: []string{"--database-url", "postgres://app@db/app", "--primary-url-file", badURL},
			invalid: []string{"--primary-url-file (OUTBOXD_PRIMARY_URL_FILE): is ambiguous"}},
		{name: "database URL from a file", args: []string{"--database-url-file", url},
			url: "postgres://app:pg-s3cret@db:5432/app", dump: []string{"database_url=\"host=db:5432 database=app user=app\"", "database_url_file=" + url}},
		{name: "database URL file from the environment", env: map[string]string{"OUTBOXD_DATABASE_URL_FILE": url},
			url: "postgres://app:pg-s3cret@db:5432/app"},
		{name: "the file on the command line wins over the URL's variable", args: []string{"--database-url-file", url},
			env: map[string]string{"OUTBOXD_DATABASE_URL": "postgres://other@elsewhere/other"}, url: "postgres://app:pg-s3cret@db:5432/app"},
		{name: "the URL on the command line wins over the file's variable", args: []string{"--database-url", "postgres://cli@db/app"},
			env: map[string]string{"OUTBOXD_DATABASE_URL_FILE": missing}, url: "postgres://cli@db/app"},
		{name: "URL and URL file", args: []string{"--database-url", "postgres://app@db/app", "--database-url-file", url},
			invalid: []string{"--database-url (OUTBOXD_DATABASE_URL) and --database-url-file (OUTBOXD_DATABASE_URL_FILE): give one of them, not both"}},
		{name: "URL and URL file in the environment", env: map[string]string{"OUTBOXD_DATABASE_URL": "postgres://app@db/app", "OUTBOXD_DATABASE_URL_FILE": url},
			invalid: []string{"--database-url (OUTBOXD_DATABASE_URL) and --database-url-file (OUTBOXD_DATABASE_URL_FILE): give one of them, not both"}},
		{name: "a URL file that does not parse is reported under the file's flag", args: []string{"--database-url-file", badURL},
			invalid: []string{"--database-url-file (OUTBOXD_DATABASE_URL_FILE): is ambiguous"}},
		{name: "missing URL file", args: []string{"--database-url-file", missing},
			parseErr: []string{"-database-url-file", "reading " + missing + ": no such file or directory"}},
		{name: "URL file is a directory", env: map[string]string{"OUTBOXD_DATABASE_URL_FILE": dir},
			parseErr: []string{"OUTBOXD_DATABASE_URL_FILE: reading " + dir + ": is a directory"}},
		{name: "empty URL file", args: []string{"--database-url-file", empty},
			parseErr: []string{"reading " + empty + ": the file is empty"}},

		{name: "SASL password from a file", args: append([]string{"--database-url", "postgres://db/app", "--kafka-sasl-password-file", pw}, sasl...),
			url: "postgres://db/app", pw: "kafka-s3cret", dump: []string{"kafka_sasl_password=xxxxx", "kafka_sasl_password_file=" + pw}},
		{name: "SASL password file from the environment", args: append([]string{"--database-url", "postgres://db/app"}, sasl...),
			env: map[string]string{"OUTBOXD_KAFKA_SASL_PASSWORD_FILE": pw}, url: "postgres://db/app", pw: "kafka-s3cret"},
		{name: "SASL password and password file", args: append([]string{"--database-url", "postgres://db/app", "--kafka-sasl-password", "x", "--kafka-sasl-password-file", pw}, sasl...),
			invalid: []string{"--kafka-sasl-password (OUTBOXD_KAFKA_SASL_PASSWORD) and --kafka-sasl-password-file (OUTBOXD_KAFKA_SASL_PASSWORD_FILE): give one of them, not both"}},
		{name: "missing SASL password file", args: []string{"--kafka-sasl-password-file", missing},
			parseErr: []string{"-kafka-sasl-password-file", "reading " + missing + ": no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			fs := flag.NewFlagSet("outboxd", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.Register(fs, GroupDatabase, GroupPrimary, GroupKafka)
			err := Parse(fs, tt.args, func(k string) string { return tt.env[k] })
			if tt.parseErr != nil {
				if err == nil {
					t.Fatal("Parse = nil, want an error")
				}
				for _, w := range tt.parseErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Parse error lacks %q: %v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			c.Kafka.Brokers = []string{"k:9092"}
			err = c.Validate(fs)
			var dump bytes.Buffer
			slog.New(slog.NewTextHandler(&dump, nil)).Info("starting", "config", Dump(fs))
			for what, out := range map[string]string{"Validate": errText(err), "the startup dump": dump.String()} {
				for _, secret := range []string{"s3cret", "SECOND"} {
					if strings.Contains(out, secret) {
						t.Errorf("%s shows the secret: %s", what, out)
					}
				}
			}
			if tt.invalid != nil {
				if err == nil {
					t.Fatal("Validate = nil, want an error")
				}
				for _, w := range tt.invalid {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Validate error lacks %q: %v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if c.Stream.PrimaryURL != tt.primary {
				t.Errorf("primary URL %q, want %q", c.Stream.PrimaryURL, tt.primary)
			}
			if c.Stream.DatabaseURL != tt.url || c.Kafka.SASL.Password != tt.pw {
				t.Errorf("database URL %q, SASL password %q; want %q, %q", c.Stream.DatabaseURL, c.Kafka.SASL.Password, tt.url, tt.pw)
			}
			for _, w := range tt.dump {
				if !strings.Contains(dump.String(), w) {
					t.Errorf("the startup dump lacks %s: %s", w, dump.String())
				}
			}
		})
	}
}
