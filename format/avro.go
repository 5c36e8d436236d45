package format

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// avroCodec encodes JSON payloads per an Avro schema: the JSON value is
// checked against the schema and converted to the values hamba/avro
// writes, then written in Avro's binary encoding.
type avroCodec struct {
	schema avro.Schema
	// raw: the schema is a string or bytes: the row's text or bytes are
	// the value as they are, not JSON (a Debezium EventRouter's payload,
	// an aggregate id key).
	raw bool
}

func newAvro(s Schema) (*avroCodec, error) {
	// Named types live in a cache of this codec's own: two subjects may
	// define one name differently.
	cache := &avro.SchemaCache{}
	// A referenced schema defines its named types before the schema that
	// uses them; each is parsed once, in an order in which what it uses
	// came first.
	pending := make([]string, 0, len(s.References))
	for name := range s.References {
		pending = append(pending, name)
	}
	slices.Sort(pending)
	for len(pending) > 0 {
		var left []string
		var last error
		for _, name := range pending {
			if _, err := avro.ParseWithCache(s.References[name], "", cache); err != nil {
				left, last = append(left, name), err
			}
		}
		if len(left) == len(pending) {
			return nil, fmt.Errorf("parsing the referenced schema %s: %w", left[0], last)
		}
		pending = left
	}
	sch, err := avro.ParseWithCache(s.Text, "", cache)
	if err != nil {
		return nil, err
	}
	t := sch.Type()
	return &avroCodec{schema: sch, raw: t == avro.String || t == avro.Bytes}, nil
}

func (c *avroCodec) encode(b, in []byte) ([]byte, error) {
	var v any
	switch {
	case c.raw && c.schema.Type() == avro.String:
		if !utf8.Valid(in) {
			return nil, misfit("", "not UTF-8 text, which an Avro string must be")
		}
		v = string(in)
	case c.raw:
		v = in
	default:
		j, err := parseJSON(in)
		if err != nil {
			return nil, err
		}
		if v, err = fromJSON(c.schema, j, "$"); err != nil {
			return nil, err
		}
	}
	out, err := avro.Marshal(c.schema, v)
	if err != nil {
		return nil, fmt.Errorf("writing Avro: %w", err)
	}
	return append(b, out...), nil
}

func (c *avroCodec) decode(body []byte) ([]byte, error) {
	var v any
	if err := avro.Unmarshal(c.schema, body, &v); err != nil {
		return nil, fmt.Errorf("reading Avro: %w", err)
	}
	if c.raw {
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return x, nil
		}
	}
	j, err := toJSON(c.schema, v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// fromJSON converts the JSON value j (numbers as json.Number) to what
// hamba/avro writes for schema s, or says where it does not fit.
func fromJSON(s avro.Schema, j any, path string) (any, error) {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		if j != nil {
			return nil, misfit(path, "want null, have %s", kind(j))
		}
		return nil, nil
	case *avro.PrimitiveSchema:
		return primitiveFromJSON(s, j, path)
	case *avro.RecordSchema:
		obj, ok := j.(map[string]any)
		if !ok {
			return nil, misfit(path, "want an object for record %s, have %s", s.FullName(), kind(j))
		}
		out := make(map[string]any, len(s.Fields()))
		for _, f := range s.Fields() {
			fv, ok := obj[f.Name()]
			if !ok {
				if f.HasDefault() {
					continue // written as the schema's default
				}
				return nil, misfit(path+"."+f.Name(), "missing, and the field has no default")
			}
			v, err := fromJSON(f.Type(), fv, path+"."+f.Name())
			if err != nil {
				return nil, err
			}
			out[f.Name()] = v
		}
		if len(obj) > len(out) {
			for _, name := range sortedKeys(obj) {
				if _, ok := out[name]; !ok && !hasField(s, name) {
					return nil, misfit(path+"."+name, "record %s has no such field", s.FullName())
				}
			}
		}
		return out, nil
	case *avro.EnumSchema:
		str, ok := j.(string)
		if !ok || !slices.Contains(s.Symbols(), str) {
			return nil, misfit(path, "want one of the symbols of enum %s %v, have %s", s.FullName(), s.Symbols(), brief(j))
		}
		return str, nil
	case *avro.ArraySchema:
		arr, ok := j.([]any)
		if !ok {
			return nil, misfit(path, "want an array, have %s", kind(j))
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			v, err := fromJSON(s.Items(), e, path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *avro.MapSchema:
		obj, ok := j.(map[string]any)
		if !ok {
			return nil, misfit(path, "want an object for a map, have %s", kind(j))
		}
		out := make(map[string]any, len(obj))
		for k, e := range obj {
			v, err := fromJSON(s.Values(), e, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	case *avro.FixedSchema:
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			return decimalFromJSON(d, j, path)
		}
		str, ok := j.(string)
		if !ok {
			return nil, misfit(path, "want a string of %d bytes for fixed %s, have %s", s.Size(), s.FullName(), kind(j))
		}
		raw, err := latin1(str, path)
		if err != nil {
			return nil, err
		}
		if len(raw) != s.Size() {
			return nil, misfit(path, "want %d bytes for fixed %s, have %d", s.Size(), s.FullName(), len(raw))
		}
		arr := reflect.New(reflect.ArrayOf(s.Size(), reflect.TypeFor[byte]())).Elem()
		reflect.Copy(arr, reflect.ValueOf(raw))
		return arr.Interface(), nil
	case *avro.UnionSchema:
		return unionFromJSON(s, j, path)
	}
	return nil, misfit(path, "schema type %s is not supported", s.Type())
}

// unionFromJSON takes the first branch j fits: a plain JSON value, as an
// outbox payload has it, not Avro's JSON encoding with the branch named.
func unionFromJSON(s *avro.UnionSchema, j any, path string) (any, error) {
	if j == nil {
		if s.Nullable() {
			return map[string]any(nil), nil
		}
		return nil, misfit(path, "null, which the union %s does not take", s.String())
	}
	var first error
	for _, t := range s.Types() {
		if t.Type() == avro.Null {
			continue
		}
		v, err := fromJSON(t, j, path)
		if err == nil {
			return map[string]any{unionName(t): v}, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, misfit(path, "fits no branch of the union %s (first branch: %v)", s.String(), first)
}

// unionName is how hamba/avro names a union's branch.
func unionName(s avro.Schema) string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		name += "." + string(l.Logical().Type())
	}
	return name
}

func hasField(s *avro.RecordSchema, name string) bool {
	return slices.ContainsFunc(s.Fields(), func(f *avro.Field) bool { return f.Name() == name })
}

func primitiveFromJSON(s *avro.PrimitiveSchema, j any, path string) (any, error) {
	var logical avro.LogicalType
	if s.Logical() != nil {
		logical = s.Logical().Type()
	}
	switch s.Type() {
	case avro.Boolean:
		if b, ok := j.(bool); ok {
			return b, nil
		}
		return nil, misfit(path, "want a boolean, have %s", kind(j))
	case avro.String:
		if str, ok := j.(string); ok {
			return str, nil
		}
		return nil, misfit(path, "want a string, have %s", kind(j))
	case avro.Bytes:
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			return decimalFromJSON(d, j, path)
		}
		str, ok := j.(string)
		if !ok {
			return nil, misfit(path, "want a string of bytes (code points 0 to 255), have %s", kind(j))
		}
		return latin1(str, path)
	case avro.Int:
		switch logical {
		case avro.Date:
			if str, ok := j.(string); ok {
				t, err := time.Parse(time.DateOnly, str)
				if err != nil {
					return nil, misfit(path, "want a date (2006-01-02) or days since 1970-01-01, have %s", brief(j))
				}
				return t, nil
			}
			n, err := integer(j, math.MinInt32, math.MaxInt32, path)
			if err != nil {
				return nil, err
			}
			return time.Unix(n*86400, 0).UTC(), nil
		case avro.TimeMillis:
			n, err := integer(j, math.MinInt32, math.MaxInt32, path)
			return time.Duration(n) * time.Millisecond, err
		}
		n, err := integer(j, math.MinInt32, math.MaxInt32, path)
		return int32(n), err
	case avro.Long:
		switch logical {
		case avro.TimestampMillis, avro.TimestampMicros, avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			return timestampFromJSON(logical, j, path)
		case avro.TimeMicros:
			n, err := integer(j, math.MinInt64, math.MaxInt64, path)
			return time.Duration(n) * time.Microsecond, err
		}
		return integer(j, math.MinInt64, math.MaxInt64, path)
	case avro.Float:
		f, err := float(j, path)
		if err == nil && !math.IsInf(f, 0) && math.Abs(f) > math.MaxFloat32 {
			return nil, misfit(path, "%v is out of range for a float", f)
		}
		return float32(f), err
	case avro.Double:
		return float(j, path)
	}
	return nil, misfit(path, "schema type %s is not supported", s.Type())
}

func integer(j any, lo, hi int64, path string) (int64, error) {
	n, ok := j.(json.Number)
	if !ok {
		return 0, misfit(path, "want an integer, have %s", kind(j))
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || i < lo || i > hi {
		return 0, misfit(path, "want an integer from %d to %d, have %s", lo, hi, n)
	}
	return i, nil
}

func float(j any, path string) (float64, error) {
	n, ok := j.(json.Number)
	if !ok {
		return 0, misfit(path, "want a number, have %s", kind(j))
	}
	f, err := n.Float64()
	if err != nil {
		return 0, misfit(path, "%s is out of range for a double", n)
	}
	return f, nil
}

// timestampFromJSON takes a number (milliseconds or microseconds since
// the epoch, as the logical type says) or an RFC 3339 text.
func timestampFromJSON(l avro.LogicalType, j any, path string) (time.Time, error) {
	local := l == avro.LocalTimestampMillis || l == avro.LocalTimestampMicros
	if str, ok := j.(string); ok {
		layouts := []string{time.RFC3339Nano}
		if local {
			layouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"}
		}
		for _, layout := range layouts {
			if t, err := time.Parse(layout, str); err == nil {
				return t, nil
			}
		}
		return time.Time{}, misfit(path, "want a timestamp (%s) or a number since the epoch, have %s", layouts[0], brief(j))
	}
	n, err := integer(j, math.MinInt64, math.MaxInt64, path)
	if err != nil {
		return time.Time{}, err
	}
	if l == avro.TimestampMillis || l == avro.LocalTimestampMillis {
		return time.UnixMilli(n).UTC(), nil
	}
	return time.UnixMicro(n).UTC(), nil
}

// decimalFromJSON takes a number or its text, refusing one with more
// digits after the point than the schema's scale rather than rounding it.
func decimalFromJSON(d *avro.DecimalLogicalSchema, j any, path string) (*big.Rat, error) {
	var text string
	switch x := j.(type) {
	case json.Number:
		text = string(x)
	case string:
		text = x
	default:
		return nil, misfit(path, "want a decimal number or its text, have %s", kind(j))
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, misfit(path, "want a decimal number, have %s", brief(j))
	}
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale())), nil)))
	if !scaled.IsInt() {
		return nil, misfit(path, "%s has more digits after the point than the scale %d", text, d.Scale())
	}
	if digits := len(new(big.Int).Abs(scaled.Num()).String()); d.Precision() > 0 && digits > d.Precision() {
		return nil, misfit(path, "%s has more digits than the precision %d", text, d.Precision())
	}
	return r, nil
}

// latin1 reads Avro's JSON form of bytes: one code point 0 to 255 a byte.
func latin1(s, path string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 255 {
			return nil, misfit(path, "want bytes as code points 0 to 255, have %q", r)
		}
		out = append(out, byte(r))
	}
	return out, nil
}

// toJSON converts what hamba/avro reads for schema s to a JSON value: a
// union's branch unwrapped, bytes as code points, logical types as their
// underlying numbers (a decimal as its text).
func toJSON(s avro.Schema, v any) (any, error) {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	switch s := s.(type) {
	case *avro.RecordSchema:
		m, _ := v.(map[string]any)
		out := make(orderedObject, 0, len(s.Fields()))
		for _, f := range s.Fields() {
			fv, err := toJSON(f.Type(), m[f.Name()])
			if err != nil {
				return nil, err
			}
			out = append(out, member{f.Name(), fv})
		}
		return out, nil
	case *avro.UnionSchema:
		m, _ := v.(map[string]any)
		for name, bv := range m {
			t, _ := s.Types().Get(name)
			if t == nil {
				return nil, fmt.Errorf("union branch %s is not in the schema", name)
			}
			return toJSON(t, bv)
		}
		if v != nil {
			// A nullable union reads its value unwrapped.
			for _, t := range s.Types() {
				if t.Type() != avro.Null {
					return toJSON(t, v)
				}
			}
		}
		return nil, nil
	case *avro.ArraySchema:
		arr, _ := v.([]any)
		out := make([]any, len(arr))
		for i, e := range arr {
			var err error
			if out[i], err = toJSON(s.Items(), e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case *avro.MapSchema:
		m, _ := v.(map[string]any)
		out := make(map[string]any, len(m))
		for k, e := range m {
			var err error
			if out[k], err = toJSON(s.Values(), e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	switch x := v.(type) {
	case []byte:
		return codePoints(x), nil
	case *big.Rat:
		scale := 0
		if l, ok := s.(avro.LogicalTypeSchema); ok {
			if d, ok := l.Logical().(*avro.DecimalLogicalSchema); ok {
				scale = d.Scale()
			}
		}
		return json.Number(x.FloatString(scale)), nil
	case time.Time:
		var l avro.LogicalType
		if ls, ok := s.(avro.LogicalTypeSchema); ok && ls.Logical() != nil {
			l = ls.Logical().Type()
		}
		switch l {
		case avro.Date:
			return x.Unix() / 86400, nil
		case avro.TimestampMicros, avro.LocalTimestampMicros:
			return x.UnixMicro(), nil
		}
		return x.UnixMilli(), nil
	case time.Duration:
		if s.Type() == avro.Int {
			return x.Milliseconds(), nil
		}
		return x.Microseconds(), nil
	case float32:
		return float64(x), nil
	}
	if f, ok := s.(*avro.FixedSchema); ok {
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Array {
			return nil, fmt.Errorf("fixed %s read as %T", f.FullName(), v)
		}
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return codePoints(b), nil
	}
	return v, nil
}

func codePoints(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// orderedObject is a JSON object written in its members' order (a
// record's fields in the schema's order).
type orderedObject []member

type member struct {
	name  string
	value any
}

func (o orderedObject) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(m.name)
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// kind names a JSON value's type for an error.
func kind(j any) string {
	switch j.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", j)
}

// brief shows a JSON scalar in an error, cut short.
func brief(j any) string {
	switch x := j.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case json.Number:
		return string(x)
	}
	return kind(j)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
