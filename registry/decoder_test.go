package registry_test

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/registry"
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
			d, err := registry.NewDecoder(registry.DecoderConfig{URLs: []string{tc.url}, Username: "u", Password: tc.pass, Value: true})
			if err != nil {
				t.Fatal(err)
			}
			out, err := d.Decode(t.Context(), tc.rec)
			var ue *registry.UnavailableError
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
