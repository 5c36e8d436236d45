package field

import "testing"

// Settings render as the one who configured a component set them: a
// command's flags, a pipelines file's keys, or Go fields, through the
// Configs that hold the component's.
func TestNames(t *testing.T) {
	t.Parallel()
	keys := func(path string) string {
		return map[string]string{"Stream.CreateSlot": "create-slot", "Stream.BackfillWhere": "backfill-where", "Stream.FailoverSlot": "failover-slot"}[path]
	}
	// The slot's names as the stream renames them, in a pipeline.
	slotNames := func(n Names) Names {
		return n.Under("Stream").Renamed(func(p string) string {
			return map[string]string{"Create": "CreateSlot", "Failover": "FailoverSlot"}[p]
		})
	}
	fix := []Setting{{"Create", "true"}, {"BackfillWhere", "x > 1"}}
	tests := []struct {
		name                           string
		names                          Names
		of, set, run, line, unknownSet string
	}{
		{"flags", Flags(keys), "--failover-slot", "--failover-slot=on", "`outboxd run --create-slot --backfill-where \"x > 1\"`", `outboxd run --create-slot --backfill-where "x > 1"`, `Stream.Table = "t"`},
		{"file keys", Names{Key: keys}, "`failover-slot`", "failover-slot: on", "`outboxd run` with `create-slot: true` and `backfill-where: x > 1`", "outboxd run, with create-slot: true and backfill-where: x > 1", `Stream.Table = "t"`},
		{"Go fields", Names{}, "Stream.FailoverSlot", `Stream.FailoverSlot = "on"`, "`outboxd run` with `Stream.CreateSlot = true` and `Stream.BackfillWhere = \"x > 1\"`", `outboxd run, with Stream.CreateSlot = true and Stream.BackfillWhere = "x > 1"`, `Stream.Table = "t"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := slotNames(tt.names)
			if got := n.Of("Failover"); got != tt.of {
				t.Errorf("Of = %q, want %q", got, tt.of)
			}
			if got := n.Set(Setting{"Failover", "on"}); got != tt.set {
				t.Errorf("Set = %q, want %q", got, tt.set)
			}
			if got := n.Run("run", fix...); got != tt.run {
				t.Errorf("Run = %q, want %q", got, tt.run)
			}
			if got := n.Line("run", fix...); got != tt.line {
				t.Errorf("Line = %q, want %q", got, tt.line)
			}
			if got := n.Set(Setting{"Table", "t"}); got != tt.unknownSet {
				t.Errorf("Set(a field with no key) = %q, want %q", got, tt.unknownSet)
			}
		})
	}
}
