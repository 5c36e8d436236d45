package config

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The schema registry's flags: each problem reported under its flag, the
// schema file read into the setting, and the password never shown.
func TestRegistryFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--database-url", "postgres://db/app", "--brokers", "k:9092"}
	cases := []struct {
		name string
		args []string
		want []string // in Validate's error; none: valid
	}{
		{"a format needs a registry", []string{"--value-format", "avro"},
			[]string{"--schema-registry-url (OUTBOXD_SCHEMA_REGISTRY_URL): required with a schema format"}},
		{"an unknown format", []string{"--key-format", "xml"},
			[]string{`--key-format (OUTBOXD_KEY_FORMAT): "xml" is not one of json, avro, protobuf, json-schema`}},
		{"the record strategy needs a record name", []string{"--value-format", "avro", "--schema-registry-url", "http://r:8081", "--subject-name-strategy", "record"},
			[]string{"--value-schema-record (OUTBOXD_VALUE_SCHEMA_RECORD): required with the record subject name strategy"}},
		{"auto-registration needs a schema", []string{"--value-format", "protobuf", "--schema-registry-url", "http://r:8081", "--auto-register-schemas"},
			[]string{"--value-schema (OUTBOXD_VALUE_SCHEMA): required with auto-registration"}},
		{"a URL with credentials", []string{"--value-format", "avro", "--schema-registry-url", "http://u:hunter2@r:8081"},
			[]string{"--schema-registry-url (OUTBOXD_SCHEMA_REGISTRY_URL): has credentials in it"}},
		{"Debezium's JSON converter and a schema format", []string{"--layout", "debezium", "--value-format", "avro", "--schema-registry-url", "http://r:8081", "--debezium-value-converter", "json"},
			[]string{"--value-format (OUTBOXD_VALUE_FORMAT): with the Debezium layout, a schema format takes the place of Debezium's value converter"}},
		{"valid", []string{"--value-format", "avro", "--key-format", "avro", "--schema-registry-url", "https://r:8081/apis/ccompat/v7",
			"--schema-registry-username", "u", "--schema-registry-password", "hunter2"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			fs := runLike(&c)
			if err := Parse(fs, append(append([]string{}, base...), tc.args...), func(string) string { return "" }); err != nil {
				t.Fatal(err)
			}
			c.ApplyLayout(fs)
			err := c.Validate(fs)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate =\n%v\nlacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Validate shows the password: %v", err)
			}
		})
	}
}

func TestRegistryFilesAreReadAndSecretsNotShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	schema := `{"type":"record","name":"E","fields":[{"name":"n","type":"long"}]}`
	c := Default()
	fs := runLike(&c)
	args := []string{"--database-url", "postgres://db/app", "--brokers", "k:9092", "--value-format", "avro", "--schema-registry-url", "http://r:8081",
		"--auto-register-schemas", "--value-schema-file", writeFile(t, dir, "e.avsc", schema+"\n"),
		"--schema-registry-username", "u", "--schema-registry-password-file", writeFile(t, dir, "pw", "hunter2\n")}
	if err := Parse(fs, args, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(fs); err != nil {
		t.Fatal(err)
	}
	pc, err := c.Pipeline(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if pc.Registry.Value.Schema != schema || pc.Registry.Password != "hunter2" || !pc.Registry.AutoRegister || pc.Registry.URLs[0] != "http://r:8081" {
		t.Errorf("pipeline registry config %+v, want the files' contents", pc.Registry)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("starting", "config", Dump(fs))
	if strings.Contains(buf.String(), "hunter2") || !strings.Contains(buf.String(), "value_schema=\""+"66 bytes\"") {
		t.Errorf("dump shows the password or the whole schema: %s", buf.String())
	}
}
