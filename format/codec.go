package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/valyala/fastjson"
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

// schemaTypes are the registry's types of each format's schemas.
func schemaTypes() map[string]sr.SchemaType {
	return map[string]sr.SchemaType{Avro: sr.TypeAvro, Protobuf: sr.TypeProtobuf, JSONSchema: sr.TypeJSON}
}

// SchemaType is the registry's type of a format's schemas (AVRO, ...); -1
// for JSON, which has none.
func SchemaType(format string) sr.SchemaType {
	if t, ok := schemaTypes()[format]; ok {
		return t
	}
	return -1
}

// Of is the format of the registry's schema type; "" for one outboxd does
// not know.
func Of(t sr.SchemaType) string {
	for f, ft := range schemaTypes() {
		if ft == t {
			return f
		}
	}
	return ""
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

// jsonParsers parse the payloads of one codec; a parser is reused, and
// holds nothing between calls.
type jsonParsers struct{ parsers fastjson.ParserPool }

// parse reads in as one JSON value in encoding/json's generic form
// (map[string]any, []any, string, bool, nil) with numbers as json.Number,
// so that no integer loses precision. A string that is not valid UTF-8 or
// holds a bad escape is refused, not mended.
func (j *jsonParsers) parse(in []byte) (any, error) {
	p, v, err := j.parseValue(in)
	if err != nil {
		return nil, err
	}
	defer j.parsers.Put(p)
	return generic(v)
}

// parseValue parses in with a parser of the pool, which the caller puts
// back once done with the value.
func (j *jsonParsers) parseValue(in []byte) (*fastjson.Parser, *fastjson.Value, error) {
	// The parser unescapes leniently (a bad escape stays as it is): the
	// validator refuses what JSON does not allow.
	if err := fastjson.ValidateBytes(in); err != nil {
		return nil, nil, fmt.Errorf("not JSON: %w", err)
	}
	// Nor does it refuse an escaped surrogate that is not half of a pair:
	// it would keep the escape's text, or put U+FFFD in its place.
	if bytes.Contains(in, []byte(`\u`)) {
		if err := checkSurrogates(in); err != nil {
			return nil, nil, err
		}
	}
	p := j.parsers.Get()
	v, err := p.ParseBytes(in)
	if err != nil {
		j.parsers.Put(p)
		return nil, nil, fmt.Errorf("not JSON: %w", err)
	}
	return p, v, nil
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

// checkSurrogates refuses valid JSON whose strings escape a surrogate
// (\ud800 to \udfff) that is not a high one followed at once by an
// escaped low one.
func checkSurrogates(in []byte) error {
	hex4 := func(b []byte) (rune, bool) {
		if len(b) < 4 {
			return 0, false
		}
		var r rune
		for _, c := range b[:4] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	bad := errors.New("not JSON text of Unicode: an escaped surrogate that is not half of a pair")
	for i := 0; i < len(in); i++ {
		if in[i] != '\\' || i+1 >= len(in) {
			continue
		}
		if in[i+1] != 'u' {
			i++ // an escape of another character, a backslash included
			continue
		}
		r, _ := hex4(in[i+2:])
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return bad
		case r >= 0xd800 && r <= 0xdbff:
			if i+7 >= len(in) || in[i+6] != '\\' || in[i+7] != 'u' {
				return bad
			}
			if lo, _ := hex4(in[i+8:]); lo < 0xdc00 || lo > 0xdfff {
				return bad
			}
			i += 11
		default:
			i += 5
		}
	}
	return nil
}

// generic converts a parsed value to encoding/json's generic form; it
// copies every byte, since the parser's memory is reused.
func generic(v *fastjson.Value) (any, error) {
	switch v.Type() {
	case fastjson.TypeNull:
		return nil, nil
	case fastjson.TypeTrue:
		return true, nil
	case fastjson.TypeFalse:
		return false, nil
	case fastjson.TypeNumber:
		return json.Number(v.String()), nil
	case fastjson.TypeString:
		b, err := v.StringBytes()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		if !utf8.Valid(b) {
			return nil, errors.New("not JSON: a string that is not UTF-8")
		}
		return string(b), nil
	case fastjson.TypeArray:
		items, _ := v.Array()
		out := make([]any, len(items))
		for i, it := range items {
			var err error
			if out[i], err = generic(it); err != nil {
				return nil, err
			}
		}
		return out, nil
	case fastjson.TypeObject:
		o, _ := v.Object()
		out := make(map[string]any, o.Len())
		var err error
		o.Visit(func(k []byte, m *fastjson.Value) {
			if err != nil {
				return
			}
			if !utf8.Valid(k) {
				err = errors.New("not JSON: a member name that is not UTF-8")
				return
			}
			var g any
			if g, err = generic(m); err == nil {
				out[string(k)] = g
			}
		})
		return out, err
	}
	return nil, fmt.Errorf("not JSON: value of type %s", v.Type())
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
