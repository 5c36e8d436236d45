// Package decoder is the consumers' half of the schema registry: it turns
// records outboxd wrote in a schema registry's wire format (its
// --value-format and --key-format avro, protobuf or json-schema) back into
// what the outbox row held, for package idempotent's handler or any
// consumer of its own. It owns looking a record's schema id up, caching
// the codec, and saying whose fault a failure is.
//
// It imports package format and package registry/srclient, never package
// registry: a consumer does not carry the producer's pipeline stage.
//
// Invariants:
//   - A failure is the registry's (an *UnavailableError: it did not
//     answer, refused the credentials or is not at the URL; trying again
//     later may succeed) or the record's (a schema id the registry says it
//     does not have, bytes not in the wire format, a payload its schema
//     does not decode), never both and never a guess: a healthy record is
//     not refused for an outage.
//   - Each schema id is looked up once and its codec kept; a failed lookup
//     is not cached, so the next record asks again.
//   - A record given to Record is not changed; a null value or key stays
//     null.
//   - The registry's password is never in an error.
package decoder
