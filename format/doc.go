// Package format turns an outbox record's key or value into the bytes of a
// schema format, and back: Avro, Protobuf or JSON Schema, framed in the
// Confluent wire format (a zero magic byte, the schema's registry id, for
// Protobuf the message indexes, then the encoding), as a schema registry's
// serializers write them.
//
// It owns the encodings, not the registry: a [Codec] is built from one
// registered schema's text (and the texts of the schemas it references),
// and its Encode takes what the outbox row holds (the payload's JSON text,
// or for a schema of type string or bytes the text or bytes as they are)
// while its Decode gives that back (JSON, or the text or bytes of a
// string or bytes schema). Fetching, caching and registering
// schemas is package registry's.
//
// Invariants:
//   - Pure: no I/O, no goroutine outlives a call, no logging, no
//     package-level mutable state (Avro named types are parsed into a
//     cache of the codec's own).
//   - Never panics, on any input.
//   - Encode never drops what it was given: a JSON member the schema has
//     no field for, a number that does not fit its type, a string where a
//     record is due are each an error naming the path in the payload
//     ($.items[2].qty) and what does not fit. A field the payload lacks
//     takes the schema's default, or is an error when it has none.
//   - Decode(Encode(x)) is x's JSON up to member order, number spelling,
//     members the schema filled from defaults and each format's JSON
//     mapping (Avro logical types as their numbers; Protobuf in protojson's
//     form, zero values left out).
package format
