package decode

import "fmt"

// ignoredName names a message type that decoding ignores.
func ignoredName(t byte) string {
	switch t {
	case 'U':
		return "update"
	case 'D':
		return "delete"
	case 'T':
		return "truncate"
	case 'Y':
		return "type"
	case 'O':
		return "origin"
	}
	return fmt.Sprintf("message type %q", t)
}

// checkIgnored checks that a message this package ignores is well formed
// (body after the type byte), so that a corrupt or truncated stream is
// noticed whatever message it breaks. Nothing is allocated or kept.
func checkIgnored(t byte, body []byte) error {
	r := reader{buf: body}
	var err error
	switch t {
	case 'U':
		err = checkUpdate(&r)
	case 'D':
		err = checkDelete(&r)
	case 'T':
		err = checkTruncate(&r)
	case 'Y':
		// Int32 type OID, String namespace, String name.
		if err = r.skip("type oid", 4); err == nil {
			if _, err = r.cstring("namespace"); err == nil {
				_, err = r.cstring("type name")
			}
		}
	case 'O':
		// Int64 origin commit LSN, String origin name.
		if err = r.skip("origin LSN", 8); err == nil {
			_, err = r.cstring("origin name")
		}
	default:
		return fmt.Errorf("unsupported message type %q", t)
	}
	if err != nil {
		return err
	}
	return r.done()
}

// checkUpdate: Int32 relation id, optionally 'K' or 'O' and the old tuple,
// then 'N' and the new tuple.
func checkUpdate(r *reader) error {
	if err := r.skip("relation id", 4); err != nil {
		return err
	}
	kind, err := r.uint8("tuple kind")
	if err != nil {
		return err
	}
	if kind == 'K' || kind == 'O' {
		if err := skipTuple(r); err != nil {
			return fmt.Errorf("old tuple: %w", err)
		}
		if kind, err = r.uint8("new tuple kind"); err != nil {
			return err
		}
	}
	if kind != 'N' {
		return fmt.Errorf("tuple kind %q, want 'K', 'O' or 'N'", kind)
	}
	if err := skipTuple(r); err != nil {
		return fmt.Errorf("new tuple: %w", err)
	}
	return nil
}

// checkDelete: Int32 relation id, 'K' or 'O', the old tuple.
func checkDelete(r *reader) error {
	if err := r.skip("relation id", 4); err != nil {
		return err
	}
	kind, err := r.uint8("tuple kind")
	if err != nil {
		return err
	}
	if kind != 'K' && kind != 'O' {
		return fmt.Errorf("tuple kind %q, want 'K' or 'O'", kind)
	}
	if err := skipTuple(r); err != nil {
		return fmt.Errorf("old tuple: %w", err)
	}
	return nil
}

// checkTruncate: Int32 relation count, Int8 options, that many Int32 relation ids.
func checkTruncate(r *reader) error {
	n, err := r.uint32("relation count")
	if err != nil {
		return err
	}
	if err := r.skip("options", 1); err != nil {
		return err
	}
	if uint64(n)*4 != uint64(r.left()) {
		return fmt.Errorf("%d relation ids need %d bytes, %d left", n, uint64(n)*4, r.left())
	}
	return r.skip("relation ids", r.left())
}

// skipTuple walks a TupleData without keeping anything.
func skipTuple(r *reader) error {
	n, err := r.uint16("column count")
	if err != nil {
		return err
	}
	for i := 0; i < int(n); i++ {
		if _, _, err := nextValue(r); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return nil
}
