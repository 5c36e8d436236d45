// Package srclient is the schema registry's HTTP client as outboxd uses
// it: both the producer's stage (package registry) and the consumers'
// decoder (package registry/decoder) build their client here, resolve a
// schema's references here and sort a failed request into one retrying
// may mend and one it cannot, so that the two halves never disagree on
// any of these. It holds no pipeline logic, so the consumer half can have
// it without the producer's stage.
//
// Invariants:
//   - An answer of the registry is read up to a bound: a misbehaving
//     server or proxy cannot make a caller read without end.
//   - A chain of references is followed to a bounded depth: a cycle fails,
//     and retrying it is never worth it.
//   - An error is transient unless the registry refused (a 4xx other than
//     408 and 429) or it is a PermanentError: what a caller cannot tell
//     apart, it retries.
//   - The registry's password is never in an error: a URL is named
//     without its credentials (RedactURL).
package srclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// New is a registry client: the URLs tried in turn, basic auth when user
// is set, TLS settings for https, a timeout per request. agent is the
// User-Agent, so the registry's logs tell the callers apart.
func New(urls []string, user, password string, tc func() (*tls.Config, error), timeout time.Duration, agent string) (*sr.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		// Each connection's handshake with the configuration of the
		// moment (files renewed in place; package tlsfiles).
		t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			cfg, err := tc()
			if err != nil {
				return nil, err
			}
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
			return d.DialContext(ctx, network, addr)
		}
	}
	opts := []sr.ClientOpt{sr.URLs(slices.Clone(urls)...), sr.UserAgent(agent), sr.HTTPClient(&http.Client{Timeout: timeout, Transport: limitedBodies{t}})}
	if user != "" {
		opts = append(opts, sr.BasicAuth(user, password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("configuring the schema registry client: %w", err)
	}
	return cl, nil
}

// maxResponseBytes bounds what is read of one answer of the registry: a
// schema with its references is kilobytes, rarely megabytes; a misbehaving
// server or proxy must not make the pipeline read without end.
const maxResponseBytes = 16 << 20

// limitedBodies is an http.RoundTripper whose answers' bodies fail past
// maxResponseBytes.
type limitedBodies struct{ next http.RoundTripper }

func (l limitedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err == nil {
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: maxResponseBytes}
	}
	return resp, err
}

// limitedBody reads at most left bytes, then fails.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("the schema registry's answer is larger than %d bytes: refused", maxResponseBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// maxReferenceDepth bounds a chain of references (a cycle, else absurd).
const maxReferenceDepth = 16

// References returns the text of each schema refs names, and of those
// they reference, by name. A chain nested deeper than the bound is a
// PermanentError; a failed lookup is cl's error, naming the reference.
func References(ctx context.Context, cl *sr.Client, refs []sr.SchemaReference) (map[string]string, error) {
	out := map[string]string{}
	if err := references(ctx, cl, refs, out, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// references adds the text of each schema refs names, and of those they
// reference, to out by name.
func references(ctx context.Context, cl *sr.Client, refs []sr.SchemaReference, out map[string]string, depth int) error {
	if depth > maxReferenceDepth {
		return Permanentf("references nest deeper than %d", maxReferenceDepth)
	}
	for _, r := range refs {
		if _, ok := out[r.Name]; ok {
			continue
		}
		ss, err := cl.SchemaByVersion(ctx, r.Subject, r.Version)
		if err != nil {
			return fmt.Errorf("reference %s (subject %q version %d): %w", r.Name, r.Subject, r.Version, err)
		}
		out[r.Name] = ss.Schema.Schema
		if err := references(ctx, cl, ss.References, out, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// PermanentError is a registry answer, or a schema it gave, that retrying
// cannot change. Its message is Err's as it is.
type PermanentError struct{ Err error }

func (e PermanentError) Error() string { return e.Err.Error() }
func (e PermanentError) Unwrap() error { return e.Err }

// Permanentf is a PermanentError of fmt.Errorf(format, a...).
func Permanentf(format string, a ...any) error {
	return PermanentError{fmt.Errorf(format, a...)}
}

// Transient reports whether a failed request may succeed later: the
// registry or the network failing, not the registry refusing. The
// registry's own answer decides when there is one; otherwise everything
// but a PermanentError is transient.
func Transient(err error) bool {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusRequestTimeout || re.StatusCode == http.StatusTooManyRequests
	}
	var p PermanentError
	return !errors.As(err, &p)
}

// RedactURL is u without its credentials, for an error: where u does not
// parse, everything up to its last "@" is left out.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		if i := strings.LastIndex(u, "@"); i >= 0 {
			return "..." + u[i:]
		}
		return u
	}
	return p.Redacted()
}

// CheckAccess adds to bad (a field and its problem) what is wrong with a
// client's URLs and credentials, as New takes them: each URL http or
// https, with no credentials in it (they go in the user and password,
// so that no URL holding a password is ever printed), and a password
// only with a user. The fields are "URLs" and "Username".
func CheckAccess(urls []string, user, password string, bad func(field, problem string)) {
	for _, u := range urls {
		p, err := url.Parse(u)
		switch {
		case err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https"):
			bad("URLs", "not an http or https URL: "+RedactURL(u))
		case p.User != nil:
			bad("URLs", "has credentials in it: give them as the username and password instead")
		}
	}
	if password != "" && user == "" {
		bad("Username", "required with a password")
	}
}
