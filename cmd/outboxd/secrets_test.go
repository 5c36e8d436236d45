package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/harness/testenv"
)

// TestPasswordsNeverShown pins the bug where a database URL that url.Parse
// refused (a '#' or a bad '%' escape in the password) was redacted with a
// password= regex that did not match, passed validation, and was logged
// verbatim at startup; sslpassword was never masked. Every output of every
// command is checked: logs at debug level, errors, status (text and JSON),
// metrics and readiness, --help and --print-sql, with the URL given as a
// flag and as the environment variable.
func TestPasswordsNeverShown(t *testing.T) {
	t.Parallel()
	const marker = "Zq9"  // in every password below, nowhere else
	closed := freeAddr(t) // nothing listens there
	host, port, _ := strings.Cut(closed, ":")
	tests := []struct {
		name   string
		url    string
		parses bool
	}{
		{"url with #", "postgres://app:pw#Zq9x@" + closed + "/app?sslmode=disable", true},
		{"url with bad % escape", "postgres://app:pw%zzZq9@" + closed + "/app?sslmode=disable", false},
		{"url with encoded @ and /", "postgres://app:pw%40%2FZq9@" + closed + "/app?sslmode=disable", true},
		{"url with / in the password", "postgres://app:pw/Zq9@" + closed + "/app?sslmode=disable", false},
		{"url with password query and sslpassword", "postgres://" + closed + "/app?user=app&password=Zq9a&sslpassword=Zq9b&sslmode=disable", true},
		{"keyword/value with spaces and symbols", "host=" + host + " port=" + port + " user=app password='pw Zq9 /@#%' dbname=app sslmode=disable", true},
		{"keyword/value with sslpassword", "host=" + host + " port=" + port + " user=app password=Zq9c sslpassword=Zq9d dbname=app sslmode=disable", true},
		{"keyword/value unterminated", "host=" + host + " user=app password='Zq9 unterminated", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var all strings.Builder
			check := func(what string, code int, out string) {
				t.Helper()
				all.WriteString(out)
				if strings.Contains(out, marker) {
					t.Errorf("%s (exit %d) shows the password:\n%s", what, code, out)
				}
			}
			// run: with a URL that parses it starts, logs its config at
			// debug level, retries the connection and serves metrics.
			cmd := exec.Command(builtBinary, "run", "--database-url", tt.url, "--brokers", "127.0.0.1:1",
				"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "u", "--kafka-sasl-password", marker+"-kafka",
				"--reconnect-max-interval", "200ms", "--log-level", "debug", "--metrics-addr", anyPort)
			var out testenv.SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			if tt.parses {
				addr := servedAt(t, out.String)
				waitFor(t, 30*time.Second, "connection retries", func() bool {
					select {
					case <-done:
						return true
					default:
					}
					code, _ := get(addr, "/healthz")
					return code == 200 && strings.Count(out.String(), "reconnecting") >= 2
				})
				for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
					code, body := get(addr, path)
					check("GET "+path, code, body)
				}
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("run did not exit")
			}
			check("run", cmd.ProcessState.ExitCode(), out.String())
			if !tt.parses {
				if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(out.String(), "does not parse") {
					t.Errorf("run with a URL that does not parse: exit %d, want %d and a message saying so:\n%s", code, exitUsage, out.String())
				}
			} else if !strings.Contains(out.String(), "database=app user=app") {
				t.Errorf("run's config dump does not say which database:\n%s", out.String())
			}

			for _, args := range [][]string{
				{"status", "--database-url", tt.url},
				{"status", "--json", "--database-url", tt.url},
				{"migrate", "--database-url", tt.url},
				{"run", "--help"},
				{"migrate", "--print-sql"},
				{"status", "--help"},
			} {
				for _, viaEnv := range []bool{false, true} {
					a := args
					if viaEnv {
						a = removeFlag(args, "--database-url")
					}
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					c := exec.CommandContext(ctx, builtBinary, a...)
					if viaEnv {
						c.Env = append(os.Environ(), "OUTBOXD_DATABASE_URL="+tt.url)
					}
					o, _ := c.CombinedOutput()
					cancel()
					check(fmt.Sprintf("outboxd %s (env %v)", strings.Join(a, " "), viaEnv), c.ProcessState.ExitCode(), string(o))
				}
			}
			if all.Len() == 0 {
				t.Fatal("no output was checked")
			}
		})
	}
}

// TestDatabaseURLWithUnencodedAtRefused pins bug 15 of issue 37: with an
// unencoded '@' in the password (postgres://app:topsecret@SECONDHALF@host),
// pgconn reads "SECONDHALF@host" as the host, and run printed it in its
// start-up log and in every retry warning, for ever, and status in its
// error. Every command that takes a database URL now refuses it at
// validation (exit 2), saying to percent-encode @ as %40, and prints no
// part of it, whether given as a flag or in the environment.
func TestDatabaseURLWithUnencodedAtRefused(t *testing.T) {
	t.Parallel()
	closed := freeAddr(t) // nothing listens there
	tests := []struct{ name, url string }{
		{"@ in the password", "postgres://app:topsecret@SECONDHALF@" + closed + "/app?sslmode=disable"},
		{"@ in the user", "postgres://app@SECONDHALF@" + closed + "/app?sslmode=disable"},
		{"many @", "postgres://app:top@secret@SECOND@HALF@" + closed + "/app?sslmode=disable"},
		{"@ in the password, no path", "postgres://app:topsecret@SECONDHALF@" + closed + "?sslmode=disable"},
	}
	commands := [][]string{
		{"run", "--brokers", "127.0.0.1:1", "--reconnect-max-interval", "200ms", "--log-level", "debug"},
		{"status"},
		{"status", "--json"},
		{"migrate"},
		{"prune", "--older-than", "7d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range commands {
				for _, viaEnv := range []bool{false, true} {
					a := append([]string{}, args...)
					ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
					c := exec.CommandContext(ctx, builtBinary, a...)
					if viaEnv {
						c.Env = append(os.Environ(), "OUTBOXD_DATABASE_URL="+tt.url)
					} else {
						c.Args = append(c.Args, "--database-url", tt.url)
					}
					o, _ := c.CombinedOutput()
					cancel()
					out, code := string(o), c.ProcessState.ExitCode()
					what := fmt.Sprintf("outboxd %s (env %v)", strings.Join(a, " "), viaEnv)
					if code != exitUsage || !strings.Contains(out, "@ as %40") {
						t.Errorf("%s: exit %d, want %d and a message saying to percent-encode @ as %%40:\n%s", what, code, exitUsage, out)
					}
					for _, secret := range []string{"topsecret", "secret", "SECOND", "HALF"} {
						if strings.Contains(out, secret) {
							t.Errorf("%s shows %q of the URL:\n%s", what, secret, out)
						}
					}
				}
			}
		})
	}
}

func removeFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
