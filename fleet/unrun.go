package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/slot"
)

// Unrun are the slots outboxd's catalog records, in the databases the
// fleet's pipelines use or used since it started, that no pipeline of it
// runs: a pipeline removed from the file (or whose slot was renamed)
// leaves its slot behind, retaining WAL on its server for ever.
type Unrun struct {
	Slots    []string // "<database>: <slot>", sorted
	Retained int64    // the WAL they retain together, in bytes
	Checked  time.Time
}

// Unrun returns what the last check found.
func (f *Fleet) Unrun() Unrun {
	f.unrunMu.Lock()
	defer f.unrunMu.Unlock()
	return f.unrun
}

// checkUnrun looks for unrun slots every f.cfg.UnrunCheckInterval, and
// again soon after a reload, until ctx ends.
func (f *Fleet) checkUnrun(ctx context.Context, reloaded <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reloaded:
			// After the removed pipelines released their slots.
			t.Reset(f.cfg.RankDelay + time.Second)
			continue
		case <-t.C:
		}
		f.findUnrun(ctx)
		t.Reset(f.cfg.UnrunCheckInterval)
	}
}

// findUnrun reads each database's catalog and sets what no pipeline runs,
// logging its change. A database it cannot reach is left out (its
// pipeline says why).
func (f *Fleet) findUnrun(ctx context.Context) {
	f.mu.Lock()
	urls := slices.Sorted(func(yield func(string) bool) {
		for u := range f.urls {
			if !yield(u) {
				return
			}
		}
	})
	running := map[string][]string{} // by URL
	for _, m := range f.members {
		running[m.spec.Config.Stream.DatabaseURL] = append(running[m.spec.Config.Stream.DatabaseURL], streamSlot(m.spec.Config))
	}
	f.mu.Unlock()

	catalogs := map[string]slot.CatalogSlots{}
	runs := map[string]map[string]bool{} // by database
	for _, u := range urls {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cat, err := readCatalog(cctx, u)
		cancel()
		if err != nil {
			f.log.Debug("reading outboxd's catalog of slots", "err", err)
			continue
		}
		catalogs[cat.Database] = cat
		if runs[cat.Database] == nil {
			runs[cat.Database] = map[string]bool{}
		}
		for _, s := range running[u] {
			runs[cat.Database][s] = true
		}
	}
	var found Unrun
	for db, cat := range catalogs {
		for name, retained := range cat.Retained {
			if runs[db][name] {
				continue
			}
			found.Slots = append(found.Slots, db+": "+name)
			found.Retained += max(retained, 0)
		}
	}
	slices.Sort(found.Slots)
	found.Checked = time.Now()
	f.unrunMu.Lock()
	changed := !slices.Equal(found.Slots, f.unrun.Slots)
	f.unrun = found
	f.unrunMu.Unlock()
	if changed && len(found.Slots) > 0 {
		var drops []string
		for _, s := range found.Slots {
			_, name, _ := strings.Cut(s, ": ")
			drops = append(drops, dropSlotSQL(name))
		}
		f.log.Warn("replication slots in outboxd's catalog that no pipeline runs: they retain WAL until dropped; drop each (on its database) once no other deployment runs it",
			"slots", found.Slots, "retained_wal_bytes", found.Retained, "drop", strings.Join(drops, " "))
	}
}

func readCatalog(ctx context.Context, url string) (slot.CatalogSlots, error) {
	conn, err := slot.Connect(ctx, url, "")
	if err != nil {
		return slot.CatalogSlots{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return slot.ReadCatalogSlots(ctx, conn)
}

// dropSlotSQL is the SQL that drops a slot outboxd no longer runs, and its
// record in outboxd's catalog (without which a later pipeline of that
// slot would take it for a lost one).
func dropSlotSQL(name string) string {
	lit := sqlquote.Literal(name)
	return fmt.Sprintf("SELECT pg_drop_replication_slot(%s); DELETE FROM outboxd_slots WHERE slot_name = %s;", lit, lit)
}

// logRemoved says, for each pipeline a reload removed (or whose slot it
// renamed), that its slot stays and how to drop it; kept are the pipelines
// of the new file.
func (f *Fleet) logRemoved(removed []*Member, kept []Spec) {
	for _, m := range removed {
		name := streamSlot(m.spec.Config)
		url := m.spec.Config.Stream.DatabaseURL
		if slices.ContainsFunc(kept, func(s Spec) bool { return streamSlot(s.Config) == name && s.Config.Stream.DatabaseURL == url }) {
			continue
		}
		f.log.Warn("pipeline no longer in the file: its slot stays on the server and retains WAL until it is dropped "+
			"(outboxd_unrun_slots counts it); drop it once no replica or other deployment runs it",
			"pipeline", m.Name(), "slot", name, "drop", dropSlotSQL(name))
	}
}
