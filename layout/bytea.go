package layout

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// appendBytea appends the bytes of a bytea value in PostgreSQL's text form:
// hex (`\x` and two hex digits per byte, the default bytea_output) or, should
// the server use bytea_output = 'escape', the escape form (`\\` for a
// backslash, `\ooo` octal for other escaped bytes, anything else literal).
// An escape-form value never starts with `\x`, so the two cannot be confused.
func appendBytea(buf, text []byte) ([]byte, error) {
	if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
		out, err := hex.AppendDecode(buf, text[2:])
		if err != nil {
			return buf, fmt.Errorf("bytea payload is not valid hex: %w", err)
		}
		return out, nil
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '\\' {
			buf = append(buf, c)
			continue
		}
		switch {
		case i+1 < len(text) && text[i+1] == '\\':
			buf = append(buf, '\\')
			i++
		case i+3 < len(text) && isOctal(text[i+1]) && text[i+1] <= '3' && isOctal(text[i+2]) && isOctal(text[i+3]):
			buf = append(buf, (text[i+1]-'0')<<6|(text[i+2]-'0')<<3|(text[i+3]-'0'))
			i += 3
		default:
			return buf, errors.New("bytea payload is neither hex (\\x...) nor valid escape format")
		}
	}
	return buf, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
