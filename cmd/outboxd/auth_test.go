package main

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
)

// The passwords of passwordWorld's roles; "Zq8" is in every one of them
// and nowhere else.
const (
	rightDBPassword   = "right-Zq8pw"
	wrongDBPassword   = "wrong-Zq8pw"
	rotatedDBPassword = "rotated-Zq8pw"
)

// passwordWorld is a migrated world on a PostgreSQL cluster of the test's
// own whose pg_hba.conf asks roles outboxd_auth (a superuser) and
// outboxd_nologin (NOLOGIN) for their password over TCP, both set to
// rightDBPassword. The test bed's clusters trust every connection
// (initdb --auth=trust), where no password is ever checked. The world's
// URL is outboxd_auth's, without sslmode (so prefer, the default: pgconn
// tries TLS first, which the cluster refuses); admin is the superuser URL
// of the database (trusted).
func passwordWorld(t *testing.T) (w *world, admin string) {
	t.Helper()
	pg := testenv.StartPostgres(t)
	conn, err := pgx.Connect(t.Context(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var hbaFile string
	if err := conn.QueryRow(t.Context(), "SHOW hba_file").Scan(&hbaFile); err != nil {
		t.Fatal(err)
	}
	hba := []string{
		"local all all trust",
		"host all outboxd_auth,outboxd_nologin 127.0.0.1/32 scram-sha-256",
		"host replication outboxd_auth,outboxd_nologin 127.0.0.1/32 scram-sha-256",
		"host all all 127.0.0.1/32 trust",
		"host replication all 127.0.0.1/32 trust",
	}
	for _, sql := range []string{
		"CREATE ROLE outboxd_auth SUPERUSER LOGIN PASSWORD '" + rightDBPassword + "'",
		"CREATE ROLE outboxd_nologin NOLOGIN PASSWORD '" + rightDBPassword + "'",
		"COPY (SELECT unnest(ARRAY['" + strings.Join(hba, "','") + "'])) TO '" + hbaFile + "'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin = testenv.DatabaseOn(t, pg.URL)
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("outboxd_auth", wrongDBPassword)
	u.RawQuery = ""
	wrong := u.String()
	// The reload is asynchronous: wait until the wrong password is refused.
	testenv.Eventually(t, 10*time.Second, "pg_hba.conf asking for a password", func() bool {
		c, err := pgx.Connect(t.Context(), wrong)
		if err == nil {
			c.Close(t.Context())
			return false
		}
		return strings.Contains(err.Error(), "28P01")
	})
	u.User = url.UserPassword("outboxd_auth", rightDBPassword)
	return migratedWorld(t, u.String()), admin
}

// withUser is w's URL with another user and password.
func withUser(t *testing.T, w *world, user, password string) *world {
	t.Helper()
	u, err := url.Parse(w.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	c := *w
	c.url = u.String()
	return &c
}

// TestDatabaseRefusesCredentialsAtStart pins bug 20 of issue 37: a wrong
// database password was logged as "cannot reach PostgreSQL", after the
// unrelated line of the TLS attempt (sslmode=prefer), and retried for
// ever. PostgreSQL refusing the credentials on run's first connection
// now stops it with exit 2 and a message that says "authentication
// failed", naming the user and host, not the TLS attempt, and never a
// password.
func TestDatabaseRefusesCredentialsAtStart(t *testing.T) {
	t.Parallel()
	w, _ := passwordWorld(t)
	u, err := url.Parse(w.url)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, user, password, sqlstate string
	}{
		{"wrong password", "outboxd_auth", wrongDBPassword, "SQLSTATE 28P01"},
		{"role not permitted to log in", "outboxd_nologin", rightDBPassword, "SQLSTATE 28000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := withUser(t, w, tt.user, tt.password).start(t)
			code := p.wait(t, time.Minute)
			log := p.log()
			t.Logf("exit %d, log:\n%s", code, log)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d; log:\n%s", code, exitUsage, log)
			}
			for _, want := range []string{"authentication failed", `user \"` + tt.user + `\"`, "at " + u.Host, tt.sqlstate} {
				if !strings.Contains(log, want) {
					t.Errorf("the log does not say %s:\n%s", want, log)
				}
			}
			for _, unwanted := range []string{"Zq8", "cannot reach PostgreSQL", "reconnecting", "tls error", "server refused TLS"} {
				if strings.Contains(log, unwanted) {
					t.Errorf("the log says %q:\n%s", unwanted, log)
				}
			}
		})
	}
}

// TestDatabaseRefusesRotatedPasswordAfterStart: bug 20 of issue 37, the
// choice made for a refusal after a successful start (the password
// rotated under a running process): run keeps retrying, with a Warn that
// says "authentication failed", and shows no password.
func TestDatabaseRefusesRotatedPasswordAfterStart(t *testing.T) {
	t.Parallel()
	w, admin := passwordWorld(t)
	p := w.start(t)
	waitLogged(t, p, "msg=streaming", time.Minute)
	conn, err := pgx.Connect(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	for _, sql := range []string{
		"ALTER ROLE outboxd_auth PASSWORD '" + rotatedDBPassword + "'",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'outboxd_auth' AND backend_type = 'walsender'",
	} {
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	waitLogged(t, p, `msg="authentication failed`, time.Minute)
	time.Sleep(2 * time.Second)
	select {
	case <-p.done:
		t.Fatalf("outboxd stopped instead of retrying:\n%s", p.log())
	default:
	}
	log := p.log()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "authentication failed") {
			t.Log(line)
		}
		if strings.Contains(line, "authentication failed") && !strings.Contains(line, "level=WARN") {
			t.Errorf("a refusal after the start is logged at %s, want Warn", line)
		}
	}
	if strings.Contains(log, "Zq8") {
		t.Errorf("the log shows a password:\n%s", log)
	}
}
