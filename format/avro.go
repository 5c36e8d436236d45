package format

import (
	"encoding/binary"
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
	"github.com/valyala/fastjson"
)

// avroCodec encodes JSON payloads per an Avro schema: the JSON value is
// checked against the schema and converted to the values hamba/avro
// writes, then written in Avro's binary encoding.
type avroCodec struct {
	jsonParsers
	avroWriters
	schema avro.Schema
	// raw: the schema is a string or bytes, or a union of null and one of
	// them (rawBranch: its index; -1 for no union): the row's text or
	// bytes are the value as they are, not JSON (a Debezium EventRouter's
	// payload, as its Avro converter registers a nullable column's; an
	// aggregate id key). rawType is avro.String or avro.Bytes.
	raw       bool
	rawType   avro.Type
	rawBranch int
	// reader decodes records, within bounds: a length or count in
	// garbage bytes must not make a consumer allocate without limit.
	reader avro.API
}

// Bounds of what decoding one record may allocate: a string or bytes
// value, and the items of one array or map block.
const (
	maxDecodeBytes = 64 << 20
	maxDecodeItems = 1 << 20
)

// rawSide reports whether s takes the row's bytes as they are: a string
// or bytes without a logical type other than uuid, alone or in a union
// with null.
func rawSide(s avro.Schema) (ok bool, t avro.Type, branch int) {
	plain := func(s avro.Schema) bool {
		p, ok := s.(*avro.PrimitiveSchema)
		if !ok || (p.Type() != avro.String && p.Type() != avro.Bytes) {
			return false
		}
		return p.Logical() == nil || p.Logical().Type() == avro.UUID
	}
	if plain(s) {
		return true, s.Type(), -1
	}
	u, isUnion := s.(*avro.UnionSchema)
	if !isUnion || len(u.Types()) != 2 || !u.Nullable() {
		return false, "", -1
	}
	for i, t := range u.Types() {
		if plain(t) {
			return true, t.Type(), i
		}
	}
	return false, "", -1
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
	c := &avroCodec{schema: sch, reader: avro.Config{MaxByteSliceSize: maxDecodeBytes, MaxSliceAllocSize: maxDecodeItems}.Freeze()}
	c.raw, c.rawType, c.rawBranch = rawSide(sch)
	c.defaults = map[*avro.Field][]byte{}
	if err := collectDefaults(sch, c.defaults, map[string]bool{}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *avroCodec) encode(b, in []byte) ([]byte, error) {
	if c.raw {
		if c.rawType == avro.String && !utf8.Valid(in) {
			return nil, misfit("", "not UTF-8 text, which an Avro string must be")
		}
		if c.rawBranch >= 0 {
			b = binary.AppendVarint(b, int64(c.rawBranch))
		}
		// Avro writes a long as Go writes a varint: zig-zag, then base 128.
		return append(binary.AppendVarint(b, int64(len(in))), in...), nil
	}
	p, j, err := c.parseValue(in)
	if err != nil {
		return nil, err
	}
	defer c.parsers.Put(p)
	w := c.get()
	defer c.put(w)
	if err := c.writeJSON(w, c.schema, j, "$"); err != nil {
		return nil, err
	}
	return append(b, w.Buffer()...), nil
}

func (c *avroCodec) decode(body []byte) ([]byte, error) {
	var v any
	if err := c.reader.Unmarshal(c.schema, body, &v); err != nil {
		return nil, fmt.Errorf("reading Avro: %w", err)
	}
	if c.raw {
		if m, ok := v.(map[string]any); ok && len(m) == 1 { // a union's branch
			for _, bv := range m {
				v = bv
			}
		}
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

// text is a JSON string's text, refused when it is not UTF-8 or not a
// string at all.
func text(j *fastjson.Value, path string) (string, error) {
	b, err := j.StringBytes()
	if err != nil {
		return "", misfit(path, "want a string, have %s", kind(j))
	}
	if !utf8.Valid(b) {
		return "", misfit(path, "a string that is not UTF-8")
	}
	return string(b), nil
}

func hasField(s *avro.RecordSchema, name string) bool {
	return slices.ContainsFunc(s.Fields(), func(f *avro.Field) bool { return f.Name() == name })
}

func integer(j *fastjson.Value, lo, hi int64, path string) (int64, error) {
	if j.Type() != fastjson.TypeNumber {
		return 0, misfit(path, "want an integer, have %s", kind(j))
	}
	i, err := j.Int64()
	if err != nil || i < lo || i > hi {
		return 0, misfit(path, "want an integer from %d to %d, have %s", lo, hi, brief(j))
	}
	return i, nil
}

func float(j *fastjson.Value, path string) (float64, error) {
	if j.Type() != fastjson.TypeNumber {
		return 0, misfit(path, "want a number, have %s", kind(j))
	}
	f, err := strconv.ParseFloat(string(j.MarshalTo(nil)), 64)
	if err != nil {
		return 0, misfit(path, "%s is out of range for a double", brief(j))
	}
	return f, nil
}

// timestampFromJSON takes a number (milliseconds or microseconds since
// the epoch, as the logical type says) or an RFC 3339 text.
func timestampFromJSON(l avro.LogicalType, j *fastjson.Value, path string) (time.Time, error) {
	local := l == avro.LocalTimestampMillis || l == avro.LocalTimestampMicros
	if j.Type() == fastjson.TypeString {
		str, _ := text(j, path)
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
func decimalFromJSON(d *avro.DecimalLogicalSchema, j *fastjson.Value, path string) (*big.Rat, error) {
	var num string
	switch j.Type() {
	case fastjson.TypeNumber:
		num = string(j.MarshalTo(nil))
	case fastjson.TypeString:
		num, _ = text(j, path)
	default:
		return nil, misfit(path, "want a decimal number or its text, have %s", kind(j))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || !decimalText(num) {
		return nil, misfit(path, "want a decimal number, have %s", brief(j))
	}
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale())), nil)))
	if !scaled.IsInt() {
		return nil, misfit(path, "%s has more digits after the point than the scale %d", num, d.Scale())
	}
	if digits := len(new(big.Int).Abs(scaled.Num()).String()); d.Precision() > 0 && digits > d.Precision() {
		return nil, misfit(path, "%s has more digits than the precision %d", num, d.Precision())
	}
	return r, nil
}

// decimalText reports whether s is a decimal number as JSON writes one
// (an optional minus, digits, a fraction, an exponent): big.Rat also reads
// fractions and base prefixes, which are not.
func decimalText(s string) bool {
	i := 0
	digits := func() bool {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	if !digits() {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	return i == len(s)
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
		if l == avro.LocalTimestampMillis || l == avro.LocalTimestampMicros {
			// hamba/avro reads a local timestamp as the same wall clock
			// in the process's zone: its value is that wall clock in UTC.
			x = time.Date(x.Year(), x.Month(), x.Day(), x.Hour(), x.Minute(), x.Second(), x.Nanosecond(), time.UTC)
		}
		switch l {
		case avro.Date:
			days := x.Unix() / 86400
			if x.Unix()%86400 < 0 {
				days--
			}
			return days, nil
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
func kind(j *fastjson.Value) string {
	switch j.Type() {
	case fastjson.TypeNull:
		return "null"
	case fastjson.TypeTrue, fastjson.TypeFalse:
		return "a boolean"
	case fastjson.TypeNumber:
		return "a number"
	case fastjson.TypeString:
		return "a string"
	case fastjson.TypeArray:
		return "an array"
	}
	return "an object"
}

// brief shows a JSON scalar in an error, cut short.
func brief(j *fastjson.Value) string {
	switch j.Type() {
	case fastjson.TypeString:
		b, _ := j.StringBytes()
		x := string(b)
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case fastjson.TypeNumber:
		return string(j.MarshalTo(nil))
	}
	return kind(j)
}
