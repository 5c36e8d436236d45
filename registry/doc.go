// Package registry is the pipeline stage that gives records a schema
// registry's formats: it stands between the replication stream (package
// cdc) and the pump, takes each record the layout made, encodes its value
// and key per the schema registered for them (package format's codecs),
// and hands the record on framed in the Confluent wire format.
//
// It owns the schema registry: which subject a record's schema is under
// (the topic, record and topic-record name strategies), fetching a
// subject's latest or pinned schema and the schemas it references,
// caching them, looking "latest" up again (every RefreshInterval, and
// before refusing a payload the cached one does not fit), registering a
// schema only when asked to (AutoRegister), and retrying a registry that
// does not answer.
//
// The registry's HTTP client (how much of an answer is read, a schema's
// references, which failures are transient) is package registry/srclient,
// shared with the consumers' decoder, package registry/decoder, which
// imports neither this package nor anything of the producer's.
//
// Invariants:
//   - Never skips and never publishes unencoded: a payload or key that
//     does not fit its schema is handed on as a *outbox.RowError naming
//     the row, the subject, the schema's version and id and where it does
//     not fit, in the record's place, so the pump dead-letters it raw or
//     stops the pipeline there.
//   - A registry that does not answer delays, never drops: Apply waits
//     (the record and every one after it wait, so nothing is confirmed
//     past them) and the fetch is retried with backoff for as long as the
//     stage runs. A cached schema goes on being used while a refresh fails.
//   - Answers that retrying cannot change (a subject that does not exist,
//     credentials refused, a schema that does not parse) stop the
//     pipeline with an error naming the subject and what to do.
//   - Apply, like the pump's, takes nothing when its context ends first:
//     the same change may be offered again.
//   - The registry's password is never in an error or a log.
package registry
