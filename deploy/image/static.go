package image

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// elfArchs names the architectures of ELF machines as GOARCH and OCI do.
var elfArchs = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_386:     "386",
	elf.EM_ARM:     "arm",
	elf.EM_PPC64:   "ppc64le",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// checkStatic refuses a binary the image cannot run: not ELF, or linked
// against a C library (the image has none: build with CGO_ENABLED=0). It
// returns the binary's architecture, as GOARCH names it.
func checkStatic(bin []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked (it names an interpreter), and the image has no C library: build it with CGO_ENABLED=0")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return "", fmt.Errorf("linked against %v, which the image does not have: build it with CGO_ENABLED=0", libs)
	}
	arch, ok := elfArchs[f.Machine]
	if !ok || f.Machine == elf.EM_PPC64 && f.Data != elf.ELFDATA2LSB {
		return "", fmt.Errorf("built for %s, an architecture the image does not know", f.Machine)
	}
	return arch, nil
}
