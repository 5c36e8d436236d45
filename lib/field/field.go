// Package field names the problems a component finds with its own
// configuration, one field at a time, and the settings its messages tell
// a user to change (Names), so that whoever configured it hears each
// under the name they set it by: a command under its flag, environment
// variable or pipelines file key, a library user under the Go field.
//
// Invariants:
//   - An Error's Field is a path of Go field names of the Config that
//     reported it ("ReadLinger"), prefixed by each Config that holds that
//     one (Under: "Stream.ReadLinger" in a pipeline.Config). Nothing in it
//     names a flag; the command maps paths to its settings.
//   - Validate methods report every problem at once: Problems collects
//     them, and its Err joins them (nil for none).
//   - A component's message names a setting only through its Config's
//     Names, by field path: the command supplies the rendering (flags or
//     file keys); the zero Names shows the path.
package field

import (
	"errors"
	"fmt"
)

// Error is a problem with one field of a configuration.
type Error struct {
	Field   string // the field's path: "ReadLinger", "Stream.ReadLinger"
	Problem string // what is wrong with its value: "must not be negative"
}

func (e *Error) Error() string { return e.Field + ": " + e.Problem }

// Problems collects the problems of a configuration.
type Problems []error

// Add adds a problem with field.
func (p *Problems) Add(field, problem string) {
	*p = append(*p, &Error{Field: field, Problem: problem})
}

// Addf adds a problem with field, formatted.
func (p *Problems) Addf(field, format string, a ...any) { p.Add(field, fmt.Sprintf(format, a...)) }

// Err joins the problems; nil for none.
func (p Problems) Err() error { return errors.Join(p...) }

// Under returns the problems err joins (or err alone), each *Error's
// field prefixed with prefix and a dot: the problems of a Config held in
// another's field prefix.
func Under(prefix string, err error) []error {
	var out []error
	for _, e := range Unjoin(err) {
		var fe *Error
		if errors.As(e, &fe) {
			e = &Error{Field: prefix + "." + fe.Field, Problem: fe.Problem}
		}
		out = append(out, e)
	}
	return out
}

// Unjoin returns the errors errors.Join joined into err, those joined
// into them too, or err alone; none for nil.
func Unjoin(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Unjoin(e)...)
	}
	return out
}
