// Package slot owns the server side of a logical replication slot: the slot
// itself (checked, created, adopted, read from pg_replication_slots), the
// record outboxd keeps of it (outboxd_slots), the publication it streams and
// the tables and columns it publishes, the server that holds it (its
// identity, and whether another host of the URL is a newer primary), the
// WAL the slot retains, and the heartbeat that moves an idle slot along.
// run, migrate and status all use it. Its Provisioner is the one place that
// decides what to do with a slot at start (create, adopt, refuse, backfill
// again), for run (package cdc) and migrate alike; the backfill's rows are
// the caller's (a Backfiller), so the package does not import the stream
// (cdc -> slot, never back). It works over regular connections, and opens
// short-lived replication connections only for what the replication
// protocol alone does (IDENTIFY_SYSTEM, creating a slot with an exported
// snapshot, ALTER_REPLICATION_SLOT); the stream's connection is cdc's.
// The slot's server may be a physical standby that decodes (PostgreSQL
// 16+, standby.go): the standby is checked first (CheckStandby), and
// outboxd_slots is then the primary's (Catalog).
//
// Invariants:
//   - A slot is created only when the caller asks for it (a Provisioner's
//     CreatePolicy, or Create); a slot that is missing, invalidated or
//     unusable is reported with a typed error (ErrMissing, ErrInvalidated,
//     ErrUnusable) that says what to do, and is never recreated silently.
//   - A slot is dropped only when nothing was ever confirmed from it: one
//     whose backfill outboxd_slots records as unfinished (it is created
//     again and the backfill run again whole), or one just created over a
//     table that turned out to hold rows (CreateOnFreshInstall).
//   - All of a Provisioner's work on a slot happens under Lock.
//   - A slot on a standby is set up only when a primary URL is given and
//     the standby passes CheckStandby; outboxd_slots is never written on
//     a standby (it cannot be).
//   - The catalog is read only through the queries in this package; each
//     fact (does the publication exist, does it publish the outbox table,
//     which columns of its tables it publishes, who holds the slot, is it
//     this database's) has one query.
package slot
