package cdc

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outboxd/cdc/readpace"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/slot"
)

// Config configures a Streamer. Zero durations and names take the defaults
// below (see WithDefaults).
type Config struct {
	// DatabaseURL is a libpq-style URL or keyword/value string of the
	// database holding the outbox. The replication connection is derived
	// from it (replication=database). Required.
	DatabaseURL string
	// PrimaryURL reaches the primary when DatabaseURL reaches a physical
	// standby that decodes (PostgreSQL 16+): the slot is created, read and
	// streamed on the standby, while what must be written goes to the
	// primary (outboxd_slots, and the running-transactions record a slot
	// created on a standby waits for; the heartbeat is the pipeline's).
	// The standby is checked at start (slot.CheckStandby). While
	// DatabaseURL reaches a primary (a promoted standby) it is unused.
	// Default "": a standby is refused.
	PrimaryURL string
	// Slot is the logical replication slot (plugin pgoutput). Default DefaultSlot.
	Slot string
	// CreateSlot creates the slot when it is missing. Without
	// BackfillWhere, rows committed before it existed are not published
	// (logged as a warning). Default false: a missing slot is a permanent
	// error that names the slot and the recovery command (see
	// slot.LostError), never a silent new start.
	CreateSlot bool
	// BackfillWhere, with CreateSlot, creates the slot with an exported
	// snapshot and first publishes the rows of the publication's tables
	// that match this SQL predicate as of that snapshot (each key's rows in
	// the order they were written, see BackfillOrderColumn; read in a
	// read-only transaction), waits for Kafka to acknowledge them,
	// and only then streams from the slot's consistent point: every row
	// committed before the slot is in the snapshot, every later one in the
	// slot. A backfill interrupted before Kafka acknowledged all of it is
	// run again whole on the next start (the slot is dropped and created
	// again: duplicates, no loss). Default "": no backfill.
	BackfillWhere string
	// BackfillOrderColumn names the column a backfill reads each table's
	// rows in order of, ties broken by the id column (ORDER BY col NULLS
	// LAST, id), so that each key's rows are published in the order they
	// were written: a timestamptz, timestamp or integer column set in that
	// order (DEFAULT clock_timestamp(), a bigserial). Every table of the
	// publication must have it. Default "": the id column when it is an
	// integer filled from a sequence (identity, serial: the default
	// table), else Columns.Timestamp; a table with neither is refused
	// (ErrBackfillUnordered) before anything is published. It applies to
	// every backfill this process runs, also one left unfinished by an
	// earlier start.
	BackfillOrderColumn string
	// FailoverSlot chooses whether a slot created here is a failover slot
	// (PostgreSQL 17+), and whether an existing one is made one: see
	// slot.FailoverMode. Default slot.FailoverAuto.
	FailoverSlot slot.FailoverMode
	// Publication is the publication over the outbox table(s). Default
	// DefaultPublication.
	Publication string
	// Table is an outbox table (SQL syntax: app.outbox, "App"."Outbox")
	// that the publication must publish: Run refuses to start, with a
	// permanent error wrapping slot.ErrTableMissing or
	// slot.ErrTableNotPublished, while it does not. Default "": not
	// checked, the publication's tables are streamed as they are.
	Table string
	// Columns names the outbox columns. Default layout.DefaultColumns().
	Columns layout.Columns
	// TolerateUnusableTables starts even when a table in the publication
	// lacks usable outbox columns (its rows are then rejected one by one:
	// set it only with a dead-letter topic). Default false: refuse to start.
	TolerateUnusableTables bool
	// StopOnServerChange makes a session on a server other than the last
	// one (another system identifier or timeline: a failover, a restore) a
	// permanent error instead of a fresh start from the slot. The
	// exactly-once sink sets it: its progress belongs to one timeline, and
	// a new process reads the new one's. Default false.
	StopOnServerChange bool
	// StatusInterval is the longest time between two standby status
	// updates. Default DefaultStatusInterval. It must stay well below the
	// server's wal_sender_timeout (default 60s).
	StatusInterval time.Duration
	// IdleWait is the longest the reader sleeps when nothing is due: no
	// message, no status on schedule, and every transaction received
	// confirmed (until then it wakes every 100 ms, so that a transaction
	// is confirmed within 100 ms of Kafka's acknowledgment). Default
	// DefaultIdleWait. It bounds how late an idle stream notices that the
	// server has gone silent, checks --server-timeout and asks for a reply;
	// shorter costs wake-ups when idle: each also wakes Go's monitor
	// thread, which sleeps until the earliest pending timer.
	IdleWait time.Duration
	// ReadLinger trades latency for CPU at steady rates: after a
	// transaction that came less than ReadLinger after the one before,
	// while transactions come fast enough that at least four are expected
	// per ReadLinger, with nothing else yet to read, the reader sleeps up
	// to ReadLinger (waking early only for 64 KiB) and then reads, and
	// publishes, what came meanwhile in one go. It adds up to ReadLinger
	// to an event's latency, and to how late a transaction is confirmed;
	// a slower stream is read as it arrives. Zero is off, and WithDefaults
	// leaves it so: the outboxd command's default is DefaultReadLinger.
	// At most MaxReadLinger. Only plain TCP connections on Linux linger
	// (not TLS, not Unix sockets), and only with raw I/O on: the linger is
	// a raised socket low-water mark, which OUTBOXD_RAW_IO=off turns off.
	ReadLinger time.Duration
	// SharedLinger, when set, makes the read linger engage from the
	// commit rate of every stream sharing it, and end on a tick common to
	// them (readpace.Shared): for a process running many streams, each
	// too slow for a linger of its own. It does nothing with ReadLinger 0.
	SharedLinger *readpace.Shared
	// ShutdownTimeout bounds the drain after Run's context ends: finishing
	// the open transaction, waiting for Kafka's acknowledgments, sending the
	// final status. Default DefaultShutdownTimeout. Past it, what is
	// unconfirmed is re-sent on the next start (at-least-once).
	ShutdownTimeout time.Duration
	// SlotRetryInterval is how often a standby retries a slot another
	// process is using. Default DefaultSlotRetryInterval: the takeover
	// delay after the active process dies is about this plus the server
	// noticing the death.
	SlotRetryInterval time.Duration
	// Source names where the records come from in their outboxd.source
	// header (outbox.SourceHeader: Source + "/" + the table), in place of
	// the server's "<system identifier>/<database>": a name that stays
	// when the cluster does not (pg_upgrade, a dump restored, a move to
	// another cluster), so that consumers deduplicating on source and id
	// still recognise events published again after the move. It must be
	// unique to the database: two databases under one source deduplicate
	// each other's events away. Default "": the server's.
	Source string
	// ApplicationName names the stream's connections to PostgreSQL
	// (application_name; slot.AppName's String), unless DatabaseURL sets
	// one. A standby reads the name of the process holding the slot and
	// warns when its settings fingerprint differs from this one's: it
	// would take over with other settings. Default "outboxd".
	ApplicationName string
	// TakeoverDelay is how long a standby that finds the slot released
	// waits before taking it: a standby better placed to take it (package
	// fleet ranks the replicas of a pipeline) waits less, and so goes
	// first. 0: take it at once.
	TakeoverDelay time.Duration
	// ReconnectMaxInterval caps the exponential backoff between reconnects
	// after a lost connection. Default DefaultReconnectMaxInterval.
	ReconnectMaxInterval time.Duration
	// ServerTimeout is how long the server may stay silent on the
	// replication connection, and how long setting a session up (connect,
	// checks, START_REPLICATION) may take, before the connection is taken
	// for broken and replaced: a half-open TCP connection (a network
	// partition, a host gone without a reset) never errors by itself.
	// A status sent after StatusInterval (or a third of ServerTimeout) of
	// silence asks the server for a reply, which a live server sends at
	// once, except while it replays a long transaction of which nothing
	// is published: it then reads statuses only every
	// wal_sender_timeout/2 (30 s by default), so ServerTimeout must exceed
	// that plus StatusInterval (a warning says so at start otherwise).
	// Default DefaultServerTimeout (60 s, for wal_sender_timeout's 60 s);
	// it must exceed StatusInterval.
	ServerTimeout time.Duration
	// Names renders the settings the stream's messages name (by this
	// Config's field names) as its user set them: a command's flags or a
	// pipelines file's keys. The zero Names shows the field names.
	Names field.Names
}

// SlotNames are the stream's Names for the slot package's messages,
// whose ProvisionConfig calls CreateSlot and FailoverSlot Create and
// Failover.
func (c Config) SlotNames() field.Names {
	return c.Names.Renamed(func(p string) string {
		return map[string]string{"Create": "CreateSlot", "Failover": "FailoverSlot"}[p]
	})
}

// Defaults.
const (
	DefaultSlot                 = "outboxd"
	DefaultPublication          = "outboxd"
	DefaultStatusInterval       = 10 * time.Second
	DefaultIdleWait             = time.Second
	DefaultShutdownTimeout      = 30 * time.Second
	DefaultSlotRetryInterval    = time.Second
	DefaultReconnectMaxInterval = 10 * time.Second
	DefaultServerTimeout        = 60 * time.Second
	// DefaultReadLinger is the outboxd command's --read-linger: short
	// enough that it engages only where transactions come faster than a
	// wake-up each is worth (see LingerEngagesFrom), and that the latency
	// it adds stays below what PostgreSQL's own commit-to-send adds at
	// those rates. What it saved and cost is in docs/bench/history.md.
	DefaultReadLinger = 5 * time.Millisecond
	// MaxReadLinger caps ReadLinger at the reader's confirmation interval.
	MaxReadLinger = confirmInterval
	// LingerMinTransactions is how many transactions a read linger must
	// be expected to bring for it to engage (LingerEngagesFrom).
	LingerMinTransactions = readpace.LingerMinTx
)

// LingerEngagesFrom is the commit rate, in transactions a second, from
// which a read linger of d engages (Config.ReadLinger): where at least
// LingerMinTransactions are expected per linger: 800 for
// DefaultReadLinger. 0 when d is not positive (off).
func LingerEngagesFrom(d time.Duration) float64 { return readpace.EngagesFrom(d) }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.FailoverSlot == "" {
		c.FailoverSlot = slot.FailoverAuto
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	c.Columns = c.Columns.WithDefaults()
	if c.StatusInterval <= 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.IdleWait <= 0 {
		c.IdleWait = DefaultIdleWait
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.SlotRetryInterval <= 0 {
		c.SlotRetryInterval = DefaultSlotRetryInterval
	}
	if c.ReconnectMaxInterval <= 0 {
		c.ReconnectMaxInterval = DefaultReconnectMaxInterval
	}
	if c.ServerTimeout <= 0 {
		c.ServerTimeout = DefaultServerTimeout
	}
	return c
}

// Validate reports every problem of c at once, each a *field.Error naming
// the field; zero fields mean their defaults. New refuses a Config that
// does not validate.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	if c.DatabaseURL == "" {
		bad("DatabaseURL", "required")
	}
	if c.Slot != "" {
		if err := slot.ValidName(c.Slot); err != nil {
			bad("Slot", err.Error())
		}
	}
	if c.FailoverSlot != "" {
		if _, err := slot.ParseFailoverMode(string(c.FailoverSlot)); err != nil {
			bad("FailoverSlot", fmt.Sprintf("%q is not auto, on or off", c.FailoverSlot))
		}
	}
	if c.Source != "" {
		if err := validSource(c.Source); err != nil {
			bad("Source", err.Error())
		}
	}
	if c.BackfillWhere != "" {
		if !c.CreateSlot {
			bad("BackfillWhere", "a backfill goes with creating the slot (create-slot): its rows are read in the snapshot the slot is created with")
		}
		if err := slot.CheckBackfillWhere(c.BackfillWhere); err != nil {
			bad("BackfillWhere", err.Error())
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"StatusInterval", c.StatusInterval}, {"IdleWait", c.IdleWait}, {"ShutdownTimeout", c.ShutdownTimeout},
		{"SlotRetryInterval", c.SlotRetryInterval}, {"TakeoverDelay", c.TakeoverDelay}, {"ReconnectMaxInterval", c.ReconnectMaxInterval}, {"ServerTimeout", c.ServerTimeout}} {
		if d.v < 0 {
			bad(d.field, "must not be negative")
		}
	}
	if c.ReadLinger < 0 || c.ReadLinger > MaxReadLinger {
		bad("ReadLinger", "must be between 0 and "+MaxReadLinger.String())
	}
	// Silence is noticed only after a status asked for a reply.
	if d := c.WithDefaults(); c.ServerTimeout >= 0 && c.StatusInterval >= 0 && d.ServerTimeout <= d.StatusInterval {
		bad("ServerTimeout", "must exceed the status interval ("+d.StatusInterval.String()+")")
	}
	if c.Table != "" {
		if _, err := sqlquote.ParseQualified(c.Table); err != nil {
			bad("Table", err.Error())
		}
	}
	if v := c.BackfillOrderColumn; v != "" && strings.TrimSpace(v) == "" {
		bad("BackfillOrderColumn", "must not be blank (empty: the id, else the timestamp column)")
	}
	if err := c.Columns.Validate(); err != nil {
		bad("Columns", err.Error())
	}
	return errors.Join(errs...)
}

// maxSource bounds a Source: it is in every record's header.
const maxSource = 200

// validSource refuses a Source a header should not carry.
func validSource(s string) error {
	switch {
	case len(s) > maxSource:
		return fmt.Errorf("%d bytes, want at most %d", len(s), maxSource)
	case !utf8.ValidString(s):
		return errors.New("not UTF-8 text")
	case strings.TrimSpace(s) != s:
		return errors.New("spaces before or after it")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return errors.New("a control character in it")
	}
	return nil
}
