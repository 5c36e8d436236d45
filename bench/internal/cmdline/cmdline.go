// Package cmdline is the benchmarks' command lines: it writes a command's
// arguments as one line a POSIX shell reads back into the same arguments,
// for the reports that say which command produced them, and parses the
// lists of numbers their flags take (PositiveInts).
package cmdline

import "strings"

// special are the characters that make the shell read an argument as
// something else: blanks, quotes, expansions, globs and operators.
const special = " \t\n'\"\\$`{}()[];&|<>*?#~!"

// Join joins args with spaces, single-quoting each one that is empty or
// holds a special character (a single quote inside ends the quoting, is
// escaped with a backslash, and the quoting starts again).
func Join(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, special) {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
