// Package slot owns the server side of a logical replication slot: the slot
// itself (checked, created, read from pg_replication_slots), the
// publication it streams and the tables in it, the WAL the slot retains, and
// the heartbeat that moves an idle slot along. run, migrate and status all
// use it, over a regular (not a replication) connection.
//
// Invariants:
//   - A slot is created only when the caller asks for it (Ensure with
//     create); a slot that is missing, invalidated or unusable is reported
//     with a typed error (ErrMissing, ErrInvalidated, ErrUnusable) that says
//     what to do, and never dropped or recreated here.
//   - The catalog is read only through the queries in this package; each
//     fact (does the publication exist, does it publish the outbox table,
//     who holds the slot, is it this database's) has one query.
package slot
