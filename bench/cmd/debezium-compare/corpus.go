package main

// row is one insert into Debezium's outbox table, as the comparison writes
// it: every column a SQL literal or NULL.
type row struct {
	aggType, aggID, typ, payload      string // SQL expressions
	tenant, occurredAt, occurredMs    string
	localAt, localMs, flag, day, note string
	tracing                           string
	// notExpanded marks a payload that makes Debezium's task fail with
	// table.expand.json.payload=true (the comparison leaves it out there;
	// outboxd refuses such a row instead).
	notExpanded bool
}

const null = "NULL"

// corpus is what every scenario inserts: routing values (mixed case, and
// empty), keys (non-ASCII, empty, NULL), payloads of every JSON shape
// (nested objects, arrays, numbers of each kind, escapes, non-ASCII,
// nulls, empty arrays and objects, top-level arrays and scalars, NULL),
// and the placed columns with and without values.
func corpus() []row {
	base := row{aggType: "'Order'", aggID: "'1'", typ: "'OrderCreated'", tenant: "7",
		occurredAt: "'2026-12-02 10:11:12.345678+01'", occurredMs: "'2026-12-02 10:11:12.345+00'",
		localAt: "'2026-12-02 10:11:12.345678'", localMs: "'2026-12-02 10:11:12.3'", flag: "true", day: "'2026-12-02'",
		note: "'first'", tracing: "E'traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\ntracestate=congo=t61rcWkgMzE'"}
	with := func(mod func(*row)) row { r := base; mod(&r); return r }
	jsonb := func(s string) string { return "'" + s + "'::jsonb" }
	return []row{
		// The Debezium documentation's example event.
		with(func(r *row) {
			r.payload = jsonb(`{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, ` +
				`{"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`)
		}),
		with(func(r *row) {
			r.aggType, r.aggID, r.typ = "'Customer'", "'c-ü-42'", "'CustomerUpdated'"
			r.payload = jsonb(`{"i": 7, "neg": -3, "zero": -0, "big": 12345678901, "f": 1.50, "g": 100.0, "tiny": 0.0001, "mid": 12345678.9, "e": 0.000000123, "h": 1234567.5}`)
			r.tenant, r.occurredAt, r.occurredMs, r.localAt, r.localMs, r.flag, r.day, r.note, r.tracing = null, null, null, null, null, "false", null, null, null
		}),
		with(func(r *row) {
			r.payload = jsonb(`{"s": "a\"b\\c\nd\te/f", "u": "café ☕ 😀", "c": "\u001f\u0001", "k\"ey": "v"}`)
			r.note = "E'tab\\there, quote \" and é'"
		}),
		with(func(r *row) {
			r.aggType, r.aggID = "''", "''"
			r.payload = jsonb(`{"n": null, "ea": [], "eo": {}, "arr": [1, null, 3], "nested": {"a": {"b": null, "c": [true, false]}}}`)
		}),
		with(func(r *row) {
			r.aggType, r.aggID = "'order'", null
			r.payload = jsonb(`{"rows": [{"p": 1, "q": "x"}, {"p": 2, "q": "y"}], "aa": [[1, 2], [3]]}`)
		}),
		with(func(r *row) { r.payload = jsonb(`{"m": [1, "a"], "l": [1, 12345678901]}`) }),
		with(func(r *row) { r.payload = jsonb(`{}`) }),
		with(func(r *row) { r.payload = jsonb(`42`) }),
		with(func(r *row) { r.payload = jsonb(`"just a string"`) }),
		with(func(r *row) { r.payload = jsonb(`true`) }),
		with(func(r *row) { r.payload = null; r.typ = "'OrderDeleted'" }),
		with(func(r *row) { r.payload = jsonb(`[]`) }),
		with(func(r *row) { r.payload = jsonb(`[1, 2, 3]`); r.notExpanded = true }),
		with(func(r *row) {
			r.payload = jsonb(`{"a": 1, "big": 123456789012345678901234567890}`)
			r.notExpanded = true
		}),
	}
}

// routes are the aggregatetype and type values of the corpus (the topics
// are made of them).
var (
	aggTypes = []string{"Order", "Customer", "", "order"}
	types    = []string{"OrderCreated", "CustomerUpdated", "OrderDeleted"}
)
