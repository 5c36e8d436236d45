package decoder_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/registry/decoder"
)

// What a consumer's decoder blames on the registry (an outage: retried)
// and what on the record (refused): only a schema id the registry says
// it does not have is the record's.
func TestDecoderBlamesTheRegistryNotTheRecord(t *testing.T) {
	reg := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("u:right"))))
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("s", sr.Schema{Schema: `"string"`})
	c, err := format.New(format.Schema{Format: format.Avro, Text: `"string"`})
	if err != nil {
		t.Fatal(err)
	}
	known, _ := c.Append(nil, id, []byte("x"))
	unknown, _ := c.Append(nil, id+100, []byte("x"))
	cases := []struct {
		name       string
		url, pass  string
		rec        []byte
		ok, outage bool
	}{
		{"decoded", reg.URL(), "right", known, true, false},
		{"credentials refused", reg.URL(), "wrong", known, false, true},
		{"not the registry's URL", reg.URL() + "/not/here", "right", known, false, true},
		{"unknown schema id", reg.URL(), "right", unknown, false, false},
		{"not framed", reg.URL(), "right", []byte(`{"a":1}`), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decoder.New(decoder.Config{URLs: []string{tc.url}, Username: "u", Password: tc.pass, Value: true})
			if err != nil {
				t.Fatal(err)
			}
			out, err := d.Decode(t.Context(), tc.rec)
			var ue *decoder.UnavailableError
			switch {
			case tc.ok && (err != nil || string(out) != "x"):
				t.Fatalf("Decode = %q, %v", out, err)
			case !tc.ok && err == nil:
				t.Fatalf("Decode = %q, want an error", out)
			case !tc.ok && errors.As(err, &ue) != tc.outage:
				t.Fatalf("Decode error %v: an outage %v, want %v", err, errors.As(err, &ue), tc.outage)
			}
		})
	}
}

// Config.Validate reports every problem at once, each naming its field,
// and never the password of a URL that has one.
func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cases := []struct {
		name   string
		cfg    decoder.Config
		fields []string // of the problems, in order; none: valid
	}{
		{"valid", decoder.Config{URLs: []string{"http://registry:8081"}, Value: true}, nil},
		{"keys only, https, with credentials", decoder.Config{URLs: []string{"https://registry:8081"}, Username: "u", Password: "p", Key: true}, nil},
		{"no URL", decoder.Config{Value: true}, []string{"URLs"}},
		{"not http", decoder.Config{URLs: []string{"ftp://registry"}, Value: true}, []string{"URLs"}},
		{"no host", decoder.Config{URLs: []string{"http://"}, Value: true}, []string{"URLs"}},
		{"credentials in the URL", decoder.Config{URLs: []string{"http://u:secret@registry:8081"}, Value: true}, []string{"URLs"}},
		{"password without username", decoder.Config{URLs: []string{"http://registry:8081"}, Password: "secret", Value: true}, []string{"Username"}},
		{"neither side", decoder.Config{URLs: []string{"http://registry:8081"}}, []string{"Value"}},
		{"everything at once", decoder.Config{URLs: []string{"registry:8081", "http://u:secret@r"}, Password: "secret"}, []string{"URLs", "URLs", "Username", "Value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			var problems []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				problems = j.Unwrap()
			}
			if len(problems) != len(tc.fields) {
				t.Fatalf("Validate = %v, want problems with %v", err, tc.fields)
			}
			for i, p := range problems {
				var fe *field.Error
				if !errors.As(p, &fe) || fe.Field != tc.fields[i] {
					t.Errorf("problem %d = %v, want a *field.Error of %s", i, p, tc.fields[i])
				}
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("Validate = %v: names the password", err)
			}
			if _, nerr := decoder.New(tc.cfg); (nerr == nil) != (tc.fields == nil) {
				t.Errorf("New = %v, Validate = %v: they disagree", nerr, err)
			}
		})
	}
}
