package layout

import "testing"

// BenchmarkDecodeInsert decodes a realistic insert into the default outbox
// table: a ~230-byte jsonb payload and headers with two keys.
func BenchmarkDecodeInsert(b *testing.B) { benchmarkDecodeInsert(b, DefaultColumns()) }

// BenchmarkDecodeInsertWithSource is BenchmarkDecodeInsert with the
// outboxd.source header, as cdc decodes (Columns.Source set).
func BenchmarkDecodeInsertWithSource(b *testing.B) {
	cols := DefaultColumns()
	cols.Source = testSource
	benchmarkDecodeInsert(b, cols)
}

func benchmarkDecodeInsert(b *testing.B, cols Columns) {
	payload := `{"order_id": 1001, "customer": {"id": 42, "name": "Ada", "email": "ada@example.com"}, ` +
		`"items": [{"sku": "A-1", "qty": 2, "price": 9.99}, {"sku": "B-7", "qty": 1, "price": 24.5}], ` +
		`"currency": "EUR", "total": 44.48, "status": "created"}`
	in := outboxInsert(text("1234567"), text(testKey), text("orders.created"), text(payload),
		text(`{"trace-id": "4bf92f3577b34da6a3ce929d0e0e4736", "content-type": "application/json"}`))
	d := NewDecoder(cols)
	decodeAll(b, d, outboxRelation(), testBegin())
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for b.Loop() {
		m, err := d.Decode(in)
		if err != nil || m.Kind != KindEvent {
			b.Fatal(m.Kind, err)
		}
	}
	b.ReportMetric(float64(len(payload)), "payload-bytes")
}
