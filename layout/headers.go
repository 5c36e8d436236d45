package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/outboxd/outboxd/outbox"
)

// appendHeaders turns the headers column, a JSON object, into record headers
// in the order its members appear in the text: the member name is the key;
// the value is the unescaped content of a JSON string (as encoding/json
// unescapes it: invalid UTF-8 becomes U+FFFD), or the member's JSON text
// otherwise (numbers, booleans, objects, arrays, and null as `null`).
// Values are appended to buf and carved from it. A member named "id" is an
// error: that header is the outbox id.
//
// The text is checked with json.Valid first, so the scan below only has to
// find the boundaries of valid JSON; it still checks every index, and reports
// anything unexpected as an error rather than panicking.
func (b *Builder) appendHeaders(hdrs []outbox.Header, buf []byte, raw []byte) ([]outbox.Header, []byte, error) {
	if !json.Valid(raw) {
		return hdrs, buf, errors.New("headers are not valid JSON")
	}
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return hdrs, buf, fmt.Errorf("headers are %s, want a JSON object", jsonKind(raw, i))
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return hdrs, buf, nil
	}
	for {
		end := stringEnd(raw, i)
		if end < 0 {
			return hdrs, buf, errMalformed
		}
		key, err := b.headerKey(raw[i:end])
		if err != nil {
			return hdrs, buf, err
		}
		switch key {
		case "id":
			return hdrs, buf, errors.New(`header "id" is reserved for the outbox id`)
		case outbox.SourceHeader:
			return hdrs, buf, errors.New(`header "` + outbox.SourceHeader + `" is reserved for the record's source`)
		case outbox.TransactionalIDHeader:
			return hdrs, buf, errors.New(`header "` + outbox.TransactionalIDHeader + `" is reserved for outboxd's exactly-once progress records`)
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return hdrs, buf, errMalformed
		}
		i = skipSpace(raw, i+1)
		end = valueEnd(raw, i)
		if end < 0 {
			return hdrs, buf, errMalformed
		}
		start := len(buf)
		if buf, err = appendHeaderValue(buf, raw[i:end]); err != nil {
			return hdrs, buf, fmt.Errorf("header %q: %w", key, err)
		}
		hdrs = append(hdrs, outbox.Header{Key: key, Value: buf[start:len(buf):len(buf)]})
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return hdrs, buf, errMalformed
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return hdrs, buf, nil
		default:
			return hdrs, buf, errMalformed
		}
	}
}

const errMalformed = constError("malformed JSON object")

// headerKey returns the unescaped member name of a quoted JSON string.
func (b *Builder) headerKey(quoted []byte) (string, error) {
	if plainString(quoted) {
		return b.intern(quoted[1 : len(quoted)-1]), nil
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", fmt.Errorf("header name %s: %w", quoteShort(quoted), err)
	}
	return s, nil
}

// appendHeaderValue appends a header value: the content of a JSON string, or
// the JSON text of any other value.
func appendHeaderValue(buf, v []byte) ([]byte, error) {
	if len(v) == 0 || v[0] != '"' {
		return append(buf, v...), nil
	}
	if plainString(v) {
		return append(buf, v[1:len(v)-1]...), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return buf, err
	}
	return append(buf, s...), nil
}

// plainString reports whether a quoted JSON string is its own content
// between the quotes: no escapes, valid UTF-8. Other strings go through
// encoding/json, which also replaces invalid UTF-8 with U+FFFD.
func plainString(quoted []byte) bool {
	content := quoted[1 : len(quoted)-1]
	return bytes.IndexByte(content, '\\') < 0 && utf8.Valid(content)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string starting at b[i],
// or -1.
func stringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// valueEnd returns the index just past the JSON value starting at b[i], or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// jsonKind names the kind of JSON value at b[i] for an error message.
func jsonKind(b []byte, i int) string {
	if i >= len(b) {
		return "empty"
	}
	switch b[i] {
	case '[':
		return "a JSON array"
	case '"':
		return "a JSON string"
	case 'n':
		return "JSON null"
	case 't', 'f':
		return "a JSON boolean"
	}
	return "a JSON number"
}
