package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// What Debezium's EventRouter with table.expand.json.payload=true, then
// Kafka Connect's JsonConverter with schemas.enable=false, make of a JSON
// payload (Debezium 3.6.1 JsonSchemaData, Connect 4.3 JsonConverter, both
// read for this):
//   - only a payload whose text starts with '{' or '[' is expanded; any
//     other stays the JSON string of its text;
//   - an object becomes a struct: its members in text order, less those
//     whose value is null or an empty array (they have no schema);
//   - numbers: an integer that fits 32 bits is an int32, 64 bits an int64,
//     anything with a fraction a float64 written as Java's Double.toString
//     (1.50 -> 1.5, 100.0 -> 100.0, 0.0001 -> 1.0E-4);
//   - an array takes the schema of its first non-null element; elements of
//     another kind (or another number type) leave the payload unexpanded;
//     an array of objects merges their members (in the order they first
//     appear; Debezium merges them through a HashSet, whose order varies
//     from one JVM start to the next when the elements differ in shape);
//   - the struct is written compact, strings escaped as Jackson does.
//
// Where Debezium's task would fail instead (a value that does not fit the
// inferred schema, a non-empty array at the top, an integer over 64 bits),
// expandJSON returns an error: the row is refused, never published
// differently.

// jsonNode is a parsed JSON value that keeps the members' order.
type jsonNode struct {
	kind    jsonKindT
	str     string // string value, or a number's text
	members []jsonMember
	index   map[string]int // member name -> position in members
	elems   []*jsonNode
	b       bool
}

type jsonMember struct {
	name string
	val  *jsonNode
}

type jsonKindT uint8

const (
	jNull jsonKindT = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

// parseJSONTree parses text into a tree (encoding/json's token API keeps
// the members in order).
func parseJSONTree(text []byte) (*jsonNode, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	n, err := parseJSONValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON value")
	}
	return n, nil
}

func parseJSONValue(dec *json.Decoder) (*jsonNode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch v := tok.(type) {
	case nil:
		return &jsonNode{kind: jNull}, nil
	case bool:
		return &jsonNode{kind: jBool, b: v}, nil
	case json.Number:
		return &jsonNode{kind: jNumber, str: string(v)}, nil
	case string:
		return &jsonNode{kind: jString, str: v}, nil
	case json.Delim:
		n := &jsonNode{}
		if v == '[' {
			n.kind = jArray
			for dec.More() {
				e, err := parseJSONValue(dec)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, e)
			}
		} else {
			n.kind = jObject
			for dec.More() {
				name, err := dec.Token()
				if err != nil {
					return nil, err
				}
				val, err := parseJSONValue(dec)
				if err != nil {
					return nil, err
				}
				// A repeated name keeps its first place and takes the last
				// value, as Jackson's ObjectNode does.
				if i, dup := n.index[name.(string)]; dup {
					n.members[i].val = val
					continue
				}
				if n.index == nil {
					n.index = map[string]int{}
				}
				n.index[name.(string)] = len(n.members)
				n.members = append(n.members, jsonMember{name: name.(string), val: val})
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// connectType is a Kafka Connect schema type, as JsonSchemaData infers it.
type connectType uint8

const (
	cNone connectType = iota // no schema: the member is left out
	cString
	cBool
	cInt32
	cInt64
	cFloat64
	cArray
	cStruct
)

// connectSchema is an inferred Connect schema.
type connectSchema struct {
	typ    connectType
	elem   *connectSchema // cArray
	fields []connectField // cStruct, in order
	index  map[string]int // cStruct: field name -> position
}

type connectField struct {
	name   string
	schema *connectSchema
}

// errUnexpandable is a payload Debezium leaves as a string (its schema
// inference threw before the schema was replaced).
var errUnexpandable = errors.New("not expandable")

func numberType(text string) connectType {
	if strings.ContainsAny(text, ".eE") {
		return cFloat64
	}
	if _, err := strconv.ParseInt(text, 10, 32); err == nil {
		return cInt32
	}
	if _, err := strconv.ParseInt(text, 10, 64); err == nil {
		return cInt64
	}
	return cFloat64 // a BigInteger: a float64 schema its value cannot fill
}

// inferSchema is JsonSchemaData.toConnectSchema; nil means no schema.
func inferSchema(n *jsonNode) (*connectSchema, error) {
	switch n.kind {
	case jString:
		return &connectSchema{typ: cString}, nil
	case jBool:
		return &connectSchema{typ: cBool}, nil
	case jNumber:
		return &connectSchema{typ: numberType(n.str)}, nil
	case jArray:
		if len(n.elems) == 0 {
			return nil, nil
		}
		elem, err := inferElement(n)
		if err != nil {
			return nil, err
		}
		return &connectSchema{typ: cArray, elem: elem}, nil
	case jObject:
		s := &connectSchema{typ: cStruct, index: map[string]int{}}
		for _, m := range n.members {
			fs, err := inferSchema(m.val)
			if err != nil {
				return nil, err
			}
			if _, dup := s.index[m.name]; fs != nil && !dup {
				s.index[m.name] = len(s.fields)
				s.fields = append(s.fields, connectField{name: m.name, schema: fs})
			}
		}
		return s, nil
	}
	return nil, nil // null
}

// inferElement is toConnectSchemaWithCycles: the first non-null element's
// schema, every other element of the same kind (and number type); for
// objects, the merge of every element's members.
func inferElement(arr *jsonNode) (*connectSchema, error) {
	var ref *jsonNode
	var refNum connectType
	for _, e := range arr.elems {
		if e.kind == jNull {
			continue
		}
		if ref == nil {
			ref = e
			if e.kind == jNumber {
				refNum = numberType(e.str)
			}
		}
		if e.kind != ref.kind || e.kind == jNumber && numberType(e.str) != refNum {
			return nil, errUnexpandable
		}
	}
	if ref == nil {
		return nil, errUnexpandable // "unrecognized member schema"
	}
	if ref.kind != jObject {
		s, err := inferSchema(ref)
		if err == nil && s == nil {
			err = errUnexpandable
		}
		return s, err
	}
	var merged *connectSchema
	for _, e := range arr.elems {
		if e.kind != jObject {
			continue
		}
		s, err := inferSchema(e)
		if err != nil {
			return nil, err
		}
		if merged == nil {
			merged = s
			continue
		}
		for _, f := range s.fields {
			if _, ok := merged.index[f.name]; !ok {
				merged.index[f.name] = len(merged.fields)
				merged.fields = append(merged.fields, f)
			}
		}
	}
	return merged, nil
}

// appendConnectJSON writes n as JsonConverter (schemas.enable=false) writes
// the Connect value toConnectData builds of it with schema s; an error is
// where Struct validation would fail Debezium's task.
func appendConnectJSON(buf []byte, n *jsonNode, s *connectSchema) ([]byte, error) {
	if n == nil || n.kind == jNull {
		return append(buf, "null"...), nil
	}
	mismatch := func() ([]byte, error) {
		return buf, fmt.Errorf("a JSON %s where Debezium inferred %s: its task would fail on this payload", kindName(n.kind), typeName2(s.typ))
	}
	switch s.typ {
	case cString:
		if n.kind != jString {
			return mismatch()
		}
		return appendJacksonString(buf, n.str), nil
	case cBool:
		if n.kind != jBool {
			return mismatch()
		}
		return strconv.AppendBool(buf, n.b), nil
	case cInt32, cInt64:
		if n.kind != jNumber || numberType(n.str) != s.typ {
			return mismatch()
		}
		v, _ := strconv.ParseInt(n.str, 10, 64)
		return strconv.AppendInt(buf, v, 10), nil
	case cFloat64:
		if n.kind != jNumber || !strings.ContainsAny(n.str, ".eE") {
			return mismatch()
		}
		f, err := strconv.ParseFloat(n.str, 64)
		if err != nil || math.IsInf(f, 0) {
			return buf, fmt.Errorf("number %s is out of a double's range", n.str)
		}
		return appendJavaDouble(buf, f), nil
	case cArray:
		if n.kind != jArray {
			return mismatch()
		}
		buf = append(buf, '[')
		for i, e := range n.elems {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendConnectJSON(buf, e, s.elem); err != nil {
				return buf, err
			}
		}
		return append(buf, ']'), nil
	case cStruct:
		if n.kind != jObject {
			return mismatch()
		}
		buf = append(buf, '{')
		for i, f := range s.fields {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJacksonString(buf, f.name)
			buf = append(buf, ':')
			var v *jsonNode
			if i, ok := n.index[f.name]; ok {
				v = n.members[i].val
			}
			var err error
			if buf, err = appendConnectJSON(buf, v, f.schema); err != nil {
				return buf, err
			}
		}
		return append(buf, '}'), nil
	}
	return mismatch()
}

func kindName(k jsonKindT) string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

func typeName2(t connectType) string {
	return [...]string{"nothing", "a string", "a boolean", "an int32", "an int64", "a float64", "an array", "a struct"}[t]
}

// expandJSON is the value Debezium writes for a JSON payload text with
// table.expand.json.payload=true and JsonConverter (schemas.enable=false).
func expandJSON(buf, text []byte) ([]byte, error) {
	if len(text) == 0 || text[0] != '{' && text[0] != '[' {
		return appendJacksonString(buf, string(text)), nil
	}
	tree, err := parseJSONTree(text)
	if err != nil {
		return appendJacksonString(buf, string(text)), nil // Jackson could not read it either: left as a string
	}
	s, err := inferSchema(tree)
	switch {
	case errors.Is(err, errUnexpandable):
		return appendJacksonString(buf, string(text)), nil
	case err != nil:
		return buf, err
	case s == nil: // an empty array at the top: no schema, the string stays
		return appendJacksonString(buf, string(text)), nil
	case s.typ != cStruct:
		return buf, errors.New("a JSON array at the top of the payload: Debezium's expansion makes it a struct and its task would fail")
	}
	return appendConnectJSON(buf, tree, s)
}

// appendJacksonString appends s as a JSON string the way Jackson writes
// one in JsonConverter: '"' and '\' escaped, control characters as \b \t
// \n \f \r or \u00XX, a character beyond the Basic Multilingual Plane as
// its UTF-16 surrogate pair (\uD83D\uDE00; hex upper-case), everything
// else (also other non-ASCII) as it is. Both escapes were seen in the
// comparison with Debezium (docs/debezium).
func appendJacksonString(buf []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	u4 := func(buf []byte, v rune) []byte {
		return append(buf, '\\', 'u', hex[v>>12&0xf], hex[v>>8&0xf], hex[v>>4&0xf], hex[v&0xf])
	}
	buf = append(buf, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			buf = append(buf, '\\', byte(r))
		case r == '\b':
			buf = append(buf, '\\', 'b')
		case r == '\t':
			buf = append(buf, '\\', 't')
		case r == '\n':
			buf = append(buf, '\\', 'n')
		case r == '\f':
			buf = append(buf, '\\', 'f')
		case r == '\r':
			buf = append(buf, '\\', 'r')
		case r < 0x20:
			buf = u4(buf, r)
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			buf = u4(u4(buf, hi), lo)
		default:
			buf = utf8.AppendRune(buf, r)
		}
	}
	return append(buf, '"')
}

func mustParse(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

// appendJavaDouble appends f as Java's Double.toString writes it, with the
// shortest digits that read back as f (Java 19 and later; Java 17 differs
// for a few values, e.g. 2.0E23): plain with at least one fractional digit
// for 1e-3 <= |f| < 1e7, else d.dddE[-]n.
func appendJavaDouble(buf []byte, f float64) []byte {
	if f == 0 {
		if math.Signbit(f) {
			return append(buf, "-0.0"...)
		}
		return append(buf, "0.0"...)
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	if len(e) > 1 && !strings.Contains(e, ".") {
		// One digit is the shortest: Java then takes the two-digit decimal
		// closest to f (4.9E-324 for the smallest double, not 5.0E-324).
		if two := strconv.FormatFloat(f, 'e', 1, 64); mustParse(two) == f {
			e = two
		}
	}
	if e[0] == '-' {
		buf = append(buf, '-')
		e = e[1:]
	}
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	if t := strings.TrimRight(digits, "0"); t != "" {
		digits = t
	}
	if a := math.Abs(f); a >= 1e-3 && a < 1e7 {
		if exp >= 0 {
			intPart := digits
			frac := ""
			if len(digits) > exp+1 {
				intPart, frac = digits[:exp+1], digits[exp+1:]
			} else {
				intPart += strings.Repeat("0", exp+1-len(digits))
			}
			if frac == "" {
				frac = "0"
			}
			return append(append(append(buf, intPart...), '.'), frac...)
		}
		return append(append(buf, "0."...), strings.Repeat("0", -exp-1)+digits...)
	}
	buf = append(buf, digits[0], '.')
	if len(digits) > 1 {
		buf = append(buf, digits[1:]...)
	} else {
		buf = append(buf, '0')
	}
	buf = append(buf, 'E')
	return strconv.AppendInt(buf, int64(exp), 10)
}
