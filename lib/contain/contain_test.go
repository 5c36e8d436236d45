package contain

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCall(t *testing.T) {
	t.Parallel()
	var nilMap map[string]int
	tests := []struct {
		name      string
		f         func() error
		wantErr   error  // errors.Is
		wantPanic string // the PanicError's text; "" for no panic
		wantStack string // in the stack
	}{
		{name: "returns", f: func() error { return nil }},
		{name: "returns an error", f: func() error { return io.EOF }, wantErr: io.EOF},
		{name: "panics with a value", f: func() error { panic("boom") }, wantPanic: "panic while testing: boom", wantStack: "contain.TestCall"},
		{name: "panics with an error", f: func() error { panic(io.ErrUnexpectedEOF) }, wantErr: io.ErrUnexpectedEOF,
			wantPanic: "panic while testing: unexpected EOF"},
		{name: "a runtime error", f: func() error { nilMap["x"] = 1; return nil }, wantPanic: "panic while testing: assignment to entry in nil map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Call("testing", tt.f)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Call = %v, want it to wrap %v", err, tt.wantErr)
			}
			var pe *PanicError
			switch {
			case tt.wantPanic == "" && errors.As(err, &pe):
				t.Errorf("Call = %v, want no panic", err)
			case tt.wantPanic == "" && tt.wantErr == nil && err != nil:
				t.Errorf("Call = %v, want nil", err)
			case tt.wantPanic != "" && !errors.As(err, &pe):
				t.Fatalf("Call = %v, want a *PanicError", err)
			case tt.wantPanic != "" && err.Error() != tt.wantPanic:
				t.Errorf("Call = %q, want %q", err, tt.wantPanic)
			case pe != nil && !strings.Contains(string(pe.Stack), tt.wantStack):
				t.Errorf("the stack does not name %s:\n%s", tt.wantStack, pe.Stack)
			}
		})
	}
	if Recovered("x", nil) != nil {
		t.Error("Recovered(nil) is not nil")
	}
}
