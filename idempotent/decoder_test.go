package idempotent_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
	"github.com/outboxd/outboxd/registry/decoder"
)

// produceFramed writes records as outboxd's --value-format avro
// --key-format avro writes them: the row's JSON and aggregate id in the
// Confluent wire format, under the schema ids given. A record with a
// value id not registered (unknownID) carries that id.
func (b *bed) produceFramed(t *testing.T, value, key *format.Codec, valueID, keyID int, ids ...int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, id := range ids {
		v, err := value.Append(nil, valueID, []byte(`{"n":`+strconv.Itoa(id)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		k, err := key.Append(nil, keyID, []byte("agg-"+strconv.Itoa(id%3)))
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: b.topic, Key: k, Value: v, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(id))},
			{Key: idempotent.SourceHeader, Value: []byte("7/app/public.outbox")}}}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// With a Decoder the handler sees each record's row, not its wire bytes,
// keyed as before by its headers; a registry that does not answer is an
// outage (retried, never dead-lettered); a record whose schema id the
// registry does not know is refused and dead-lettered with its bytes as
// they came.
func TestDecoderHandsTheHandlerTheRow(t *testing.T) {
	t.Parallel()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	const valueSchema = `{"type":"record","name":"Event","fields":[{"name":"n","type":"long"}]}`
	vid, _, _ := reg.RegisterSchema("t-value", sr.Schema{Schema: valueSchema})
	kid, _, _ := reg.RegisterSchema("t-key", sr.Schema{Schema: `"string"`})
	value, err := format.New(format.Schema{Format: format.Avro, Text: valueSchema})
	if err != nil {
		t.Fatal(err)
	}
	key, err := format.New(format.Schema{Format: format.Avro, Text: `"string"`})
	if err != nil {
		t.Fatal(err)
	}
	// The registry answers 503 until down is cleared.
	var down atomic.Bool
	down.Store(true)
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	dec, err := decoder.New(decoder.Config{URLs: []string{reg.URL()}, Value: true, Key: true})
	if err != nil {
		t.Fatal(err)
	}

	b := newBed(t, 1)
	dlq := testenv.Topic(t, 1)
	b.produceFramed(t, value, key, vid, kid, 1, 2, 3)
	b.produceFramed(t, value, key, vid+100, kid, 4) // a schema id the registry does not know
	b.produceFramed(t, value, key, vid, kid, 5, 2)  // 2 again: a duplicate
	group := testenv.Name(t, "group")
	h := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		id, _ := idempotent.IDHeader(r)
		_, err := tx.Exec(ctx, `INSERT INTO business (key, consumer, value) VALUES ($1, $2, $3)`, id, group, string(r.Key)+" "+string(r.Value))
		return err
	}
	r := b.start(t, idempotent.Config{Group: group, Handler: h, Decoder: dec, MaxAttempts: 2,
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, DeadLetterTopic: dlq})
	// While the registry is down nothing is handled, and nothing is
	// dead-lettered, however many retries.
	time.Sleep(2 * time.Second)
	if rows, _ := b.rows(t, group); rows != 0 {
		t.Fatalf("%d records handled while the registry was down", rows)
	}
	down.Store(false)
	b.waitRows(t, group, 4)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, err := b.pool.Query(t.Context(), `SELECT key, value FROM business WHERE consumer = $1`, group)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if _, twice := got[k]; twice {
			t.Errorf("record %s handled twice", k)
		}
		got[k] = v
	}
	want := map[string]string{"1": `agg-1 {"n":1}`, "2": `agg-2 {"n":2}`, "3": `agg-0 {"n":3}`, "5": `agg-2 {"n":5}`}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("record %s handled as %q, want %q", k, got[k], v)
		}
	}
	dl := consumeOne(t, b.brokers, dlq)
	if id, _ := idempotent.IDHeader(dl); id != "4" || dl.Value[0] != 0 || header(dl, idempotent.HeaderError) == "" {
		t.Errorf("dead letter id %s value % x error %q: want record 4 as it came, with why", id, dl.Value[:min(len(dl.Value), 8)], header(dl, idempotent.HeaderError))
	}
}
