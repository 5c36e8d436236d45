package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/sr"
)

// The schema formats, as --value-format and --key-format name them. JSON
// is no schema format: the record carries the row's bytes as they are.
const (
	JSON       = "json"
	Avro       = "avro"
	Protobuf   = "protobuf"
	JSONSchema = "json-schema"
)

// Formats lists every format's name, JSON first.
func Formats() []string { return []string{JSON, Avro, Protobuf, JSONSchema} }

// SchemaType is the registry's name for a format's schemas ("AVRO", ...);
// "" for JSON.
func SchemaType(format string) sr.SchemaType {
	switch format {
	case Avro:
		return sr.TypeAvro
	case Protobuf:
		return sr.TypeProtobuf
	case JSONSchema:
		return sr.TypeJSON
	}
	return -1
}

// Schema is one registered schema as a Codec needs it.
type Schema struct {
	Format string // Avro, Protobuf or JSONSchema
	Text   string
	// References holds the text of each schema Text references, by the
	// name Text uses for it (an Avro type's full name, a .proto file's
	// import path, a JSON Schema's $ref), and those they reference.
	References map[string]string
	// Message is, for Protobuf, the fully qualified name of the message a
	// record holds; "": the file's first message, as the registry's
	// serializers default to.
	Message string
}

// Codec encodes and decodes the values of one schema. It is safe for use
// by several goroutines.
type Codec struct {
	format string
	enc    encoding
	index  []int // Protobuf: the message's indexes in the file
}

// encoding is one format's codec of the values of one schema, without the
// wire header.
type encoding interface {
	// encode appends in's encoding to b: in is JSON text, or for a schema
	// of type string or bytes the value as it is.
	encode(b, in []byte) ([]byte, error)
	// decode returns the JSON text of body; a Protobuf body starts with
	// its message indexes.
	decode(body []byte) ([]byte, error)
}

// New parses s and builds its Codec.
func New(s Schema) (*Codec, error) {
	c := &Codec{format: s.Format}
	var err error
	switch s.Format {
	case Avro:
		c.enc, err = newAvro(s)
	case Protobuf:
		var p *protoCodec
		p, err = newProto(s)
		if err == nil {
			c.enc, c.index = p, p.index
		}
	case JSONSchema:
		c.enc, err = newJSONSchema(s)
	default:
		return nil, fmt.Errorf("format %q has no schema: want %s, %s or %s", s.Format, Avro, Protobuf, JSONSchema)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing the %s schema: %w", s.Format, err)
	}
	return c, nil
}

// Format is the codec's format.
func (c *Codec) Format() string { return c.format }

// Append appends to b the record bytes of in under schema id: the
// Confluent wire header, then in's encoding.
func (c *Codec) Append(b []byte, id int, in []byte) ([]byte, error) {
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(b, id, c.index)
	if err != nil {
		return nil, err
	}
	return c.enc.encode(b, in)
}

// Decode returns the JSON text of body, a record's bytes after the schema
// id (see ID).
func (c *Codec) Decode(body []byte) ([]byte, error) { return c.enc.decode(body) }

// ErrNotFramed is matched by ID's error for bytes that do not start with
// the Confluent wire header.
var ErrNotFramed = errors.New("not in the Confluent wire format: no magic byte and schema id")

// ID reads the Confluent wire header of a record's bytes: the schema id,
// and what follows it.
func ID(b []byte) (id int, body []byte, err error) {
	var h sr.ConfluentHeader
	id, body, err = h.DecodeID(b)
	if err != nil {
		return 0, nil, fmt.Errorf("%w (%v)", ErrNotFramed, err)
	}
	return id, body, nil
}

// parseJSON reads in as one JSON value, numbers as json.Number so that
// no integer loses precision.
func parseJSON(in []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("not JSON: more than one value")
	}
	return v, nil
}

// pathError says where in a payload a value does not fit.
type pathError struct {
	path string
	msg  string
}

func (e *pathError) Error() string { return e.path + ": " + e.msg }

func misfit(path, format string, a ...any) error {
	if path == "" {
		path = "$"
	}
	return &pathError{path: path, msg: fmt.Sprintf(format, a...)}
}
