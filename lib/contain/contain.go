// Package contain turns a goroutine's panic into an error, so that a bug
// hit by one unit of work (one pipeline of a process) stops that unit, as
// any failure does, instead of the whole process.
//
// Invariant: a recovered panic is never lost: it becomes a *PanicError
// carrying the panic's value and the stack where it happened, returned
// to whoever runs the goroutine.
package contain

import (
	"fmt"
	"runtime/debug"
)

// PanicError is a recovered panic.
type PanicError struct {
	What  string // what the goroutine was doing: "reading the replication stream"
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack where it panicked
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic while %s: %v", e.What, e.Value) }

// Unwrap returns the panic's value when it is an error (a runtime error,
// or one passed to panic).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Recovered is the *PanicError for v, what recover returned in a deferred
// function (call it there: the stack is taken where it is called), or
// nil when v is nil.
//
//	defer func() {
//		if v := recover(); v != nil {
//			err = contain.Recovered("doing X", v)
//		}
//	}()
func Recovered(what string, v any) error {
	if v == nil {
		return nil
	}
	return &PanicError{What: what, Value: v, Stack: debug.Stack()}
}

// Call runs f and returns its error, or a *PanicError when it panics.
func Call(what string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = Recovered(what, v)
		}
	}()
	return f()
}
