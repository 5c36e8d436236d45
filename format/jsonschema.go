package format

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsonSchemaCodec checks JSON payloads against a registered JSON Schema;
// the record carries the payload's own text, as the registry's JSON
// Schema serializer does.
type jsonSchemaCodec struct {
	jsonParsers
	schema *jsonschema.Schema
	// str: the schema is of type string: the row's text is the string,
	// not JSON (an aggregate id key), and the record its JSON text.
	str bool
}

// jsonSchemaURL is the URL the registered schema is compiled under; its
// references are added under their own names.
const (
	jsonSchemaBase = "outboxd:///"
	jsonSchemaURL  = jsonSchemaBase + "registered.json"
)

func newJSONSchema(s Schema) (*jsonSchemaCodec, error) {
	c := jsonschema.NewCompiler()
	// A schema names its draft with $schema; one that does not is draft-07,
	// as Confluent's JSON Schema serializer takes it by default
	// (json.schema.spec.version), not the compiler's own 2020-12, under
	// which a draft-07 tuple (items as an array) does not compile.
	c.DefaultDraft(jsonschema.Draft7)
	// Only the registered texts: the compiler must fetch nothing.
	c.UseLoader(refusingLoader{})
	add := func(url, text string) error {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return fmt.Errorf("schema %s is not JSON: %w", url, err)
		}
		return c.AddResource(url, doc)
	}
	for name, text := range s.References {
		// A relative name is relative to the registered schema, as its
		// $ref resolves it; the compiler would take it as a file.
		if u, err := url.Parse(name); err == nil && u.Scheme == "" {
			name = jsonSchemaBase + name
		}
		if err := add(name, text); err != nil {
			return nil, err
		}
	}
	if err := add(jsonSchemaURL, s.Text); err != nil {
		return nil, err
	}
	sch, err := c.Compile(jsonSchemaURL)
	if err != nil {
		return nil, err
	}
	var top struct {
		Type any `json:"type"`
	}
	_ = json.Unmarshal([]byte(s.Text), &top)
	return &jsonSchemaCodec{schema: sch, str: top.Type == "string"}, nil
}

type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is not a registered reference of the schema", url)
}

func (c *jsonSchemaCodec) encode(b, in []byte) ([]byte, error) {
	text := in
	if c.str {
		if !utf8.Valid(in) {
			return nil, misfit("", "not UTF-8 text, which a JSON string must be")
		}
		q, err := json.Marshal(string(in))
		if err != nil {
			return nil, err
		}
		text = q
	}
	doc, err := c.parse(text)
	if err != nil {
		return nil, err
	}
	if err := c.schema.Validate(doc); err != nil {
		return nil, misfit("", "does not validate: %s", oneLine(err))
	}
	return append(b, text...), nil
}

func (c *jsonSchemaCodec) decode(body []byte) ([]byte, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("a JSON Schema record that is not JSON")
	}
	return body, nil
}

// oneLine is a validation error's text on one line, for a log or a
// dead-letter header.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
