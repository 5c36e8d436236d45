package config

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"unicode"
)

// secretFile is the value of a -file flag (--database-url-file): setting
// it reads the file at once into the setting it stands for, so that what
// follows (checks, the startup dump, the command) sees one value wherever
// it came from. The flag itself holds the path, which is no secret.
type secretFile struct {
	path, secret *string
	// c and base, for Config.SkipFiles: the path is kept, the file not
	// read, and base (the setting's own flag) marked unread.
	c    *Config
	base string
}

func (s secretFile) String() string {
	if s.path == nil { // the flag package's zero value, for --help
		return ""
	}
	return *s.path
}

func (s secretFile) Set(path string) error {
	if s.c != nil && s.c.SkipFiles {
		if path == "" {
			return errors.New("the path is empty")
		}
		*s.path = path
		if s.c.unread == nil {
			s.c.unread = map[string]bool{}
		}
		s.c.unread[s.base] = true
		return nil
	}
	v, err := readSecret(path)
	if err != nil {
		return err
	}
	*s.path, *s.secret = path, v
	return nil
}

// readSecret is the content of a secret's file without its trailing
// newline and spaces (echo and editors add one). Its errors name the path
// and never the content.
func readSecret(path string) (string, error) {
	if path == "" {
		return "", errors.New("the path is empty")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named below, once
		}
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	v := strings.TrimRightFunc(string(b), unicode.IsSpace)
	if v == "" {
		return "", fmt.Errorf("reading %s: the file is empty", path)
	}
	return v, nil
}

// secretFileFlag binds a -file flag: path is where the flag keeps the
// file's name, secret the setting its content goes to.
func secretFileFlag(path, secret func(*Config) *string) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) {
		fs.Var(secretFile{path: path(c), secret: secret(c), c: c, base: partner(name)}, name, usage)
	}
}

// fileFlags maps each flag that has a -file variant to that variant
// (database-url to database-url-file), from the table's fileOf.
func fileFlags() map[string]string {
	m := map[string]string{}
	for _, f := range flags() {
		if f.fileOf != "" {
			m[f.fileOf] = f.name
		}
	}
	return m
}

// partner is the other flag of a setting given either as itself or as
// its -file variant ("" when name is neither).
func partner(name string) string {
	for base, file := range fileFlags() {
		switch name {
		case base:
			return file
		case file:
			return base
		}
	}
	return ""
}
