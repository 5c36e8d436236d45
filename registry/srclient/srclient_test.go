package srclient_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/registry/srclient"
)

// Transient is what both halves retry: the registry's own answer decides
// when there is one, a PermanentError is never retried however wrapped,
// and anything else (the network) is.
func TestTransient(t *testing.T) {
	status := func(code int) error { return &sr.ResponseError{StatusCode: code} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"HTTP 500", status(http.StatusInternalServerError), true},
		{"HTTP 503, wrapped", fmt.Errorf("asking: %w", status(http.StatusServiceUnavailable)), true},
		{"HTTP 408", status(http.StatusRequestTimeout), true},
		{"HTTP 429", status(http.StatusTooManyRequests), true},
		{"HTTP 404", status(http.StatusNotFound), false},
		{"HTTP 401", status(http.StatusUnauthorized), false},
		{"permanent", srclient.Permanentf("references nest deeper than %d", 16), false},
		{"permanent, wrapped", fmt.Errorf("asking: %w", srclient.Permanentf("no")), false},
		{"a network error", errors.New("connection refused"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := srclient.Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// A PermanentError reads as the error it holds: the stage's messages are
// the same as before it existed.
func TestPermanentfKeepsTheMessage(t *testing.T) {
	err := srclient.Permanentf("subject %q", "s")
	if err.Error() != `subject "s"` {
		t.Errorf("Permanentf = %q", err.Error())
	}
}

// RedactURL never gives the password back, whether u parses or not.
func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://registry:8081", "http://registry:8081"},
		{"http://u:secret@registry:8081", "http://u:xxxxx@registry:8081"},
		{"http://u:se cret\x7f@registry:8081", "...@registry:8081"},
		{"registry:8081", "registry:8081"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got := srclient.RedactURL(tc.in)
			if got != tc.want || strings.Contains(got, "secret") {
				t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// References follows a chain of references to its end, and refuses one
// nested past its bound as permanent: retrying does not shorten it.
func TestReferences(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	// s0 references nothing; each s<i> references s<i-1>.
	const chain = 20
	for i := range chain {
		s := sr.Schema{Schema: `"string"`}
		if i > 0 {
			s.References = []sr.SchemaReference{{Name: "r" + strconv.Itoa(i-1), Subject: "s" + strconv.Itoa(i-1), Version: 1}}
		}
		if _, _, err := reg.RegisterSchema("s"+strconv.Itoa(i), s); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := srclient.New([]string{reg.URL()}, "", "", nil, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		from      int // the schema whose references are resolved
		names     int // how many, when they resolve
		permanent bool
	}{
		{"none", 0, 0, false},
		{"a short chain", 3, 3, false},
		{"nested past the bound", chain - 1, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ss, err := cl.SchemaByVersion(t.Context(), "s"+strconv.Itoa(tc.from), 1)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := srclient.References(t.Context(), cl, ss.References)
			var p srclient.PermanentError
			switch {
			case tc.permanent && (!errors.As(err, &p) || srclient.Transient(err)):
				t.Fatalf("References = %v, want a permanent error", err)
			case !tc.permanent && (err != nil || len(refs) != tc.names):
				t.Fatalf("References = %v, %v; want %d names", refs, err, tc.names)
			}
		})
	}
}
