package image

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// checkStatic refuses a binary the image cannot run: not ELF, or linked
// against a C library (the image has none: build with CGO_ENABLED=0).
func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it names an interpreter), and the image has no C library: build it with CGO_ENABLED=0")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("linked against %v, which the image does not have: build it with CGO_ENABLED=0", libs)
	}
	return nil
}
