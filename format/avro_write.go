package format

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
	"github.com/valyala/fastjson"
)

// avroWriters are a codec's Avro writers: each payload is written into one
// straight from the parsed JSON, without building Go values first, which
// is most of what encoding costs.
type avroWriters struct {
	writers sync.Pool
	// defaults holds the encoding of each field default of the schema,
	// written for a member the payload lacks.
	defaults map[*avro.Field][]byte
}

// encodeDefault encodes f's default through hamba/avro, which owns how a
// default is read: a record of f alone, written with no value for it,
// under a configuration of its own (hamba caches encoders by a schema's
// fingerprint, which leaves defaults out: a shared one would write another
// field's default). A union's default is its first branch's: written as
// that branch, after its index.
func encodeDefault(f *avro.Field) ([]byte, error) {
	typ, prefix := f.Type(), []byte(nil)
	if u, ok := typ.(*avro.UnionSchema); ok {
		typ, prefix = u.Types()[0], []byte{0} // index 0: zig-zag 0
		if typ.Type() == avro.Null {
			return prefix, nil
		}
	}
	field, err := avro.NewField(f.Name(), typ, avro.WithDefault(f.Default()))
	if err != nil {
		return nil, err
	}
	rec, err := avro.NewRecordSchema("outboxd.Default", "", []*avro.Field{field})
	if err != nil {
		return nil, err
	}
	b, err := avro.Config{}.Freeze().Marshal(rec, map[string]any{})
	if err != nil {
		return nil, err
	}
	return append(prefix, b...), nil
}

// collectDefaults encodes the default of every field of s and of the
// types it holds, through hamba/avro, which owns how a default is read.
func collectDefaults(s avro.Schema, out map[*avro.Field][]byte, seen map[string]bool) error {
	switch s := s.(type) {
	case *avro.RecordSchema:
		if seen[s.FullName()] {
			return nil
		}
		seen[s.FullName()] = true
		for _, f := range s.Fields() {
			if f.HasDefault() {
				b, err := encodeDefault(f)
				if err != nil {
					return fmt.Errorf("the default of field %s of %s: %w", f.Name(), s.FullName(), err)
				}
				out[f] = b
			}
			if err := collectDefaults(f.Type(), out, seen); err != nil {
				return err
			}
		}
	case *avro.ArraySchema:
		return collectDefaults(s.Items(), out, seen)
	case *avro.MapSchema:
		return collectDefaults(s.Values(), out, seen)
	case *avro.UnionSchema:
		for _, t := range s.Types() {
			if err := collectDefaults(t, out, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *avroWriters) get() *avro.Writer {
	if w, ok := a.writers.Get().(*avro.Writer); ok {
		w.Reset(nil)
		w.Error = nil
		return w
	}
	return avro.NewWriter(nil, 512)
}

func (a *avroWriters) put(w *avro.Writer) {
	if cap(w.Buffer()) <= 64<<10 { // a huge payload's buffer is not kept
		a.writers.Put(w)
	}
}

// child is the path of a member or item of the value at path.
func child(path, name string) string { return path + "." + name }

// writeJSON writes the JSON value j as schema s in Avro's binary encoding,
// or says where it does not fit. A union tries its branches in order, each
// into a scratch writer, and keeps the first that fits.
func (a *avroWriters) writeJSON(w *avro.Writer, s avro.Schema, j *fastjson.Value, path string) error {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		if j.Type() != fastjson.TypeNull {
			return misfit(path, "want null, have %s", kind(j))
		}
		return nil
	case *avro.PrimitiveSchema:
		return a.writePrimitive(w, s, j, path)
	case *avro.RecordSchema:
		obj, err := j.Object()
		if err != nil {
			return misfit(path, "want an object for record %s, have %s", s.FullName(), kind(j))
		}
		found := 0
		for _, f := range s.Fields() {
			fv := obj.Get(f.Name())
			if fv == nil {
				if !f.HasDefault() {
					return misfit(child(path, f.Name()), "missing, and the field has no default")
				}
				_, _ = w.Write(a.defaults[f])
				continue
			}
			found++
			if err := a.writeJSON(w, f.Type(), fv, child(path, f.Name())); err != nil {
				return err
			}
		}
		if obj.Len() > found {
			var unknown string
			obj.Visit(func(k []byte, _ *fastjson.Value) {
				if unknown == "" && !hasField(s, string(k)) {
					unknown = string(k)
				}
			})
			if unknown == "" {
				return misfit(path, "a member appears twice")
			}
			return misfit(child(path, unknown), "record %s has no such field", s.FullName())
		}
		return nil
	case *avro.EnumSchema:
		str, err := text(j, path)
		if err == nil {
			for i, sym := range s.Symbols() {
				if sym == str {
					w.WriteInt(int32(i))
					return nil
				}
			}
		}
		return misfit(path, "want one of the symbols of enum %s %v, have %s", s.FullName(), s.Symbols(), brief(j))
	case *avro.ArraySchema:
		arr, err := j.Array()
		if err != nil {
			return misfit(path, "want an array, have %s", kind(j))
		}
		if len(arr) > 0 {
			w.WriteLong(int64(len(arr)))
			for i, e := range arr {
				if err := a.writeJSON(w, s.Items(), e, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
		w.WriteLong(0)
		return nil
	case *avro.MapSchema:
		obj, err := j.Object()
		if err != nil {
			return misfit(path, "want an object for a map, have %s", kind(j))
		}
		if obj.Len() > 0 {
			w.WriteLong(int64(obj.Len()))
			obj.Visit(func(k []byte, e *fastjson.Value) {
				if err != nil {
					return
				}
				if err = checkUTF8(k, path); err == nil {
					w.WriteString(string(k))
					err = a.writeJSON(w, s.Values(), e, child(path, string(k)))
				}
			})
			if err != nil {
				return err
			}
		}
		w.WriteLong(0)
		return nil
	case *avro.FixedSchema:
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			return writeDecimal(w, s, d, j, path)
		}
		str, err := text(j, path)
		if err != nil {
			return misfit(path, "want a string of %d bytes for fixed %s, have %s", s.Size(), s.FullName(), kind(j))
		}
		raw, err := latin1(str, path)
		if err != nil {
			return err
		}
		if len(raw) != s.Size() {
			return misfit(path, "want %d bytes for fixed %s, have %d", s.Size(), s.FullName(), len(raw))
		}
		_, _ = w.Write(raw)
		return nil
	case *avro.UnionSchema:
		if j.Type() == fastjson.TypeNull {
			for i, t := range s.Types() {
				if t.Type() == avro.Null {
					w.WriteLong(int64(i))
					return nil
				}
			}
			return misfit(path, "null, which the union %s does not take", s.String())
		}
		var first error
		scratch := a.get()
		defer a.put(scratch)
		for i, t := range s.Types() {
			if t.Type() == avro.Null {
				continue
			}
			scratch.Reset(nil)
			if err := a.writeJSON(scratch, t, j, path); err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			w.WriteLong(int64(i))
			_, _ = w.Write(scratch.Buffer())
			return nil
		}
		return misfit(path, "fits no branch of the union %s (first branch: %v)", s.String(), first)
	}
	return misfit(path, "schema type %s is not supported", s.Type())
}

func checkUTF8(k []byte, path string) error {
	if !utf8.Valid(k) {
		return misfit(path, "a member name that is not UTF-8")
	}
	return nil
}

func (a *avroWriters) writePrimitive(w *avro.Writer, s *avro.PrimitiveSchema, j *fastjson.Value, path string) error {
	var logical avro.LogicalType
	if s.Logical() != nil {
		logical = s.Logical().Type()
	}
	switch s.Type() {
	case avro.Boolean:
		switch j.Type() {
		case fastjson.TypeTrue:
			w.WriteBool(true)
			return nil
		case fastjson.TypeFalse:
			w.WriteBool(false)
			return nil
		}
		return misfit(path, "want a boolean, have %s", kind(j))
	case avro.String:
		b, err := j.StringBytes()
		if err != nil {
			return misfit(path, "want a string, have %s", kind(j))
		}
		if !utf8.Valid(b) {
			return misfit(path, "a string that is not UTF-8")
		}
		w.WriteLong(int64(len(b)))
		_, _ = w.Write(b)
		return nil
	case avro.Bytes:
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			return writeDecimal(w, s, d, j, path)
		}
		str, err := text(j, path)
		if err != nil {
			return misfit(path, "want a string of bytes (code points 0 to 255), have %s", kind(j))
		}
		raw, err := latin1(str, path)
		if err != nil {
			return err
		}
		w.WriteBytes(raw)
		return nil
	case avro.Int:
		var n int64
		var err error
		switch {
		case logical == avro.Date && j.Type() == fastjson.TypeString:
			str, _ := text(j, path)
			t, perr := time.Parse(time.DateOnly, str)
			if perr != nil {
				return misfit(path, "want a date (2006-01-02) or days since 1970-01-01, have %s", brief(j))
			}
			n = t.Unix() / 86400
			if t.Unix()%86400 < 0 {
				n--
			}
		default:
			n, err = integer(j, math.MinInt32, math.MaxInt32, path)
		}
		if err != nil {
			return err
		}
		w.WriteInt(int32(n))
		return nil
	case avro.Long:
		var n int64
		var err error
		switch logical {
		case avro.TimestampMillis, avro.TimestampMicros, avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			var t time.Time
			if t, err = timestampFromJSON(logical, j, path); err == nil {
				unit := time.Millisecond
				if logical == avro.TimestampMicros || logical == avro.LocalTimestampMicros {
					unit = time.Microsecond
				}
				if t.Nanosecond()%int(unit) != 0 {
					return misfit(path, "%s has digits below the %s the logical type %s keeps", brief(j), unit, logical)
				}
				n = t.UnixMilli()
				if unit == time.Microsecond {
					n = t.UnixMicro()
				}
			}
		default:
			n, err = integer(j, math.MinInt64, math.MaxInt64, path)
		}
		if err != nil {
			return err
		}
		w.WriteLong(n)
		return nil
	case avro.Float:
		f, err := float(j, path)
		if err != nil {
			return err
		}
		if math.Abs(f) > math.MaxFloat32 {
			return misfit(path, "%v is out of range for a float", f)
		}
		w.WriteFloat(float32(f))
		return nil
	case avro.Double:
		f, err := float(j, path)
		if err != nil {
			return err
		}
		w.WriteDouble(f)
		return nil
	}
	return misfit(path, "schema type %s is not supported", s.Type())
}

// writeDecimal writes a decimal through hamba/avro, which owns its
// two's-complement form.
func writeDecimal(w *avro.Writer, s avro.Schema, d *avro.DecimalLogicalSchema, j *fastjson.Value, path string) error {
	r, err := decimalFromJSON(d, j, path)
	if err != nil {
		return err
	}
	return marshalInto(w, s, r)
}

func marshalInto(w *avro.Writer, s avro.Schema, v any) error {
	b, err := avro.Marshal(s, v)
	if err != nil {
		return err
	}
	_, _ = w.Write(b)
	return nil
}
