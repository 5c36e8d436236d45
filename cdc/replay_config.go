package cdc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// ReplayConfig configures a Replayer: which table's rows, which of them,
// where to, how fast. Zero values take the defaults documented on each
// field.
type ReplayConfig struct {
	// DatabaseURL is the server the rows are read from (a standby will
	// do); PrimaryURL, where DatabaseURL is a standby, the primary that
	// holds outboxd_replays. The records' source is DatabaseURL's system
	// and database, as the stream's.
	DatabaseURL string
	PrimaryURL  string
	// Publication is the publication the table is in: its row filter and
	// its column list apply, as they did to the stream. Default
	// DefaultPublication.
	Publication string
	// Table is the table to replay (SQL syntax); "": the publication's
	// only table.
	Table string
	// Columns, Source and BackfillOrderColumn are the pipeline's: the
	// records are laid out as the stream lays them out, and each key's
	// rows are read in the order the backfill reads them in.
	Columns             layout.Columns
	Source              string
	BackfillOrderColumn string
	// Name names the replay: its progress in outboxd_replays, its Kafka
	// transactional id with exactly-once delivery, and the value of the
	// header ReplayHeader on each record. A replay of the same Name
	// resumes where it stopped. Default: derived from the table and the
	// selection (DefaultReplayName), so that the same command resumes.
	Name string
	// Selection chooses the rows; the zero Selection takes every row.
	Selection Selection
	// Topic, when set, is the one topic every record goes to; "": each
	// record's own topic, as the stream chose it.
	Topic string
	// Rate is the most rows a second handed on; 0: no limit.
	Rate float64
	// PageRows is how many rows one page reads; each page is its own
	// read-only transaction, and progress is recorded per page. Default
	// DefaultReplayPageRows.
	PageRows int
	// DryRun counts what would be replayed, and replays nothing.
	DryRun bool
	// Names renders the settings the Replayer's messages name.
	Names field.Names
}

// Selection chooses the rows of a replay: each given bound narrows it.
type Selection struct {
	// From and To bound the ordering column (the backfill's: the id of a
	// table filled from a sequence), inclusive, as the column's type reads
	// them ("1000", "2026-12-01 10:00:00+00").
	From, To string
	// Since and Until bound the timestamp column (Columns.Timestamp,
	// else the default table's created_at): rows written at or after
	// Since, and before Until.
	Since, Until time.Time
	// Where is an SQL predicate over the table, checked as the backfill's
	// (read only; it may read no other table).
	Where string
}

// ReplayHeader is the header every replayed record carries: the replay's
// name. A consumer that tells replays from the stream reads it; one that
// dedupes on outboxd.source and id needs not.
const ReplayHeader = "outboxd.replay"

// DefaultReplayPageRows is ReplayConfig.PageRows' default.
const DefaultReplayPageRows = 500

// WithDefaults returns c with every zero field set to its default.
func (c ReplayConfig) WithDefaults() ReplayConfig {
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if c.PageRows <= 0 {
		c.PageRows = DefaultReplayPageRows
	}
	if c.Name == "" {
		what := c.Table
		if what == "" {
			what = "publication " + c.Publication
		}
		c.Name = DefaultReplayName(what, c.Describe())
	}
	return c
}

// Describe is the selection in words, as outboxd_replays records it: a
// replay of the same name must select the same rows (and send them to the
// same place).
func (c ReplayConfig) Describe() string {
	var parts []string
	s := c.Selection
	if s.From != "" {
		parts = append(parts, "from "+s.From)
	}
	if s.To != "" {
		parts = append(parts, "to "+s.To)
	}
	if !s.Since.IsZero() {
		parts = append(parts, "since "+s.Since.UTC().Format(time.RFC3339Nano))
	}
	if !s.Until.IsZero() {
		parts = append(parts, "until "+s.Until.UTC().Format(time.RFC3339Nano))
	}
	if s.Where != "" {
		parts = append(parts, "where "+s.Where)
	}
	if len(parts) == 0 {
		parts = append(parts, "every row")
	}
	if c.Topic != "" {
		parts = append(parts, "to topic "+c.Topic)
	}
	return strings.Join(parts, ", ")
}

// DefaultReplayName is the name of a replay without one: the table and a
// digest of what it selects.
func DefaultReplayName(table, describe string) string {
	h := uint32(2166136261) // FNV-1a: a name, not a secret
	for _, b := range []byte(table + "\x00" + describe) {
		h = (h ^ uint32(b)) * 16777619
	}
	t := strings.NewReplacer(`"`, "", ".", "_", " ", "_").Replace(table)
	if len(t) > 40 {
		t = t[:40]
	}
	return fmt.Sprintf("%s_%08x", t, h)
}

// Validate reports every problem of c at once.
func (c ReplayConfig) Validate() error {
	var p field.Problems
	if c.DatabaseURL == "" {
		p.Add("DatabaseURL", "required")
	}
	if c.Name != "" && len(c.Name) > 100 {
		p.Add("Name", "at most 100 characters")
	}
	if w := c.Selection.Where; w != "" {
		if err := slot.CheckBackfillWhere(w); err != nil {
			p.Add("Selection.Where", err.Error())
		}
	}
	if s := c.Selection; !s.Since.IsZero() && !s.Until.IsZero() && !s.Since.Before(s.Until) {
		p.Add("Selection.Until", "must be after the start of the range ("+c.Names.Of("Selection.Since")+")")
	}
	if c.Topic != "" {
		if err := outbox.ValidTopic(c.Topic); err != nil {
			p.Add("Topic", err.Error())
		}
	}
	if c.Rate < 0 {
		p.Add("Rate", "must not be negative")
	}
	if c.PageRows < 0 {
		p.Add("PageRows", "must not be negative")
	}
	if err := c.Columns.Validate(); err != nil {
		return errors.Join(append([]error{err}, p...)...)
	}
	return p.Err()
}
