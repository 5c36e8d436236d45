package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/outbox"
)

// Config configures the producer. Zero values take the defaults documented
// on each field.
type Config struct {
	// Brokers are the bootstrap addresses (HOST:PORT). Required.
	Brokers []string
	// ClientID is sent to Kafka with every request. Default DefaultClientID.
	ClientID string
	// MaxRecordBytes is the largest record batch the producer builds, in
	// Kafka's terms (max.message.bytes: the record plus its framing). A
	// record that cannot fit a batch of this size on its own (its key,
	// value and headers plus at most 100 bytes of framing and 10 per
	// header) is refused before it is sent, with an error naming this
	// limit. Default DefaultMaxRecordBytes, Kafka's own default
	// message.max.bytes. Raising it helps only if the topics allow it too
	// (max.message.bytes): batches of many small records grow up to it, and
	// a broker refuses a batch larger than its limit.
	MaxRecordBytes int
	// Linger is how long a partition's batch waits for more records.
	// Default 0: send as soon as possible (batches still form while a
	// request is in flight). Raise it for throughput at the cost of latency.
	Linger time.Duration
	// Compression is the codec of produced batches: one of Compressions.
	// Default DefaultCompression, snappy, franz-go's own default. A batch
	// goes out compressed only where that makes it smaller; every consumer
	// must be able to decode the codec (zstd needs Kafka 2.1+ clients).
	Compression string
	// AllowAutoTopicCreation asks the broker to create topics it does not
	// know (the broker must have auto.create.topics.enable=true). Default
	// false: a record for an unknown topic fails for good.
	AllowAutoTopicCreation bool
	// TLS and SASL secure the connections to the brokers.
	TLS  TLS
	SASL SASL
	// Opts are appended to the client options (hooks, ...).
	Opts []kgo.Opt
	// Names renders the settings the producer's messages name (by this
	// Config's field names) as its user set them: a command's flags or a
	// pipelines file's keys. The zero Names shows the field names.
	Names field.Names

	dialer kgo.Opt // the one dialer of every client (secured)
}

// Defaults for Config.
const (
	DefaultClientID       = "outboxd"
	DefaultMaxRecordBytes = 1048588
	DefaultCompression    = "snappy"
)

// compressions are the codecs Config.Compression names, each with
// franz-go's codec.
var compressions = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// Compressions lists the names Config.Compression accepts.
func Compressions() []string { return []string{"none", "gzip", "snappy", "lz4", "zstd"} }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.Compression == "" {
		c.Compression = DefaultCompression
	}
	return c
}

// Producer produces outbox events to Kafka: the at-least-once sink of
// package pump. Safe for concurrent use.
type Producer struct {
	cl             *kgo.Client
	maxRecordBytes int
	names          field.Names
	dataLoss       *dataLossCounter
	explain        errgroup.Group // goroutines looking up a broker's limit for an error
	closeOnce      sync.Once
}

// New creates the producer. It does not contact Kafka until the first
// record or Ping.
func New(cfg Config, log *slog.Logger) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.WithDefaults().secured(log)
	if err != nil {
		return nil, err
	}
	p := &Producer{maxRecordBytes: cfg.MaxRecordBytes, names: cfg.Names, dataLoss: &dataLossCounter{log: log}}
	cl, err := kgo.NewClient(clientOpts(cfg, log, p.dataLoss.detected)...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka producer: %w", err)
	}
	p.cl = cl
	return p, nil
}

// clientOpts are the options of every producing client, transactional or
// not; cfg has its defaults.
func clientOpts(cfg Config, log *slog.Logger, onDataLoss func(string, int32), extra ...kgo.Opt) []kgo.Opt {
	if cfg.dialer == nil { // no TLS (secured)
		cfg.dialer = kgo.Dialer(rawio.Dialer(dialTimeout, nil))
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		// The one dialer (secured): franz-go's own, with raw reads and
		// writes (see package rawio: each acknowledgment wakes the
		// process), in TLS when the settings ask for it.
		cfg.dialer,
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes)),
		// The pump bounds what is in flight (records and bytes); franz-go's
		// own caps are moved out of its way so that Publish never blocks
		// the reader, which must keep sending standby status.
		kgo.MaxBufferedRecords(1 << 30),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchCompression(compressions[cfg.Compression]),
		// RecordRetries and RecordDeliveryTimeout keep their unlimited
		// defaults: an unavailable broker delays records, never fails them.
		// Nor does a connection closed before its first answer: franz-go
		// takes that for a TLS or SASL misconfiguration and fails the
		// records, but it is also what a restarting broker behind a proxy
		// or load balancer looks like (the proxy accepts, then closes:
		// found by the chaos run, which stopped there). The log still
		// says "is TLS missing?" on every try.
		kgo.AlwaysRetryEOF(),
		kgo.ProducerOnDataLossDetected(onDataLoss),
		kgo.WithLogger(kgoLogger{log}),
		kgo.WithHooks(readErrors{cfg.Names, log}),
	}
	if cfg.AllowAutoTopicCreation {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	if m := cfg.SASL.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	// The caller's options, then the user's: Config.Opts has the last word.
	return append(append(opts, extra...), cfg.Opts...)
}

// Validate reports every problem of cfg at once, each a *field.Error
// naming the field; zero fields mean their defaults. New and NewTxn refuse
// a Config that does not validate.
func (cfg Config) Validate() error {
	var p field.Problems
	if len(cfg.Brokers) == 0 {
		p.Add("Brokers", "required")
	}
	for _, b := range cfg.Brokers {
		if i := strings.LastIndex(b, ":"); i <= 0 || i == len(b)-1 {
			p.Add("Brokers", strconv.Quote(b)+" is not HOST:PORT")
		}
	}
	if c := cfg.Compression; c != "" {
		if _, ok := compressions[c]; !ok {
			p.Addf("Compression", "%q is not one of %s", c, strings.Join(Compressions(), ", "))
		}
	}
	if n := cfg.MaxRecordBytes; n != 0 && (n < 1024 || n > 1<<30) {
		p.Add("MaxRecordBytes", "must be between 1024 and 1073741824")
	}
	if cfg.Linger < 0 {
		p.Add("Linger", "must not be negative")
	}
	cfg.securityProblems(&p)
	return p.Err()
}

// toRecord is ev as a Kafka record (see the record contract).
func toRecord(ev *outbox.Event) *kgo.Record {
	rec := &kgo.Record{
		Topic:     ev.Topic,
		Key:       ev.Key,
		Value:     ev.Value,
		Timestamp: ev.RecordTime(),
		Headers:   make([]kgo.RecordHeader, len(ev.Headers)),
	}
	for i, h := range ev.Headers {
		rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return rec
}

// tooLarge is the error for a record over maxRecordBytes, nil if it fits.
func tooLarge(ev *outbox.Event, maxRecordBytes int, names field.Names) error {
	if need := wireSize(ev); need > maxRecordBytes {
		return &Error{ID: ev.ID(), Topic: ev.Topic, Err: &TooLargeError{Bytes: need, Limit: maxRecordBytes, Client: true, Setting: names.Of("MaxRecordBytes")}}
	}
	return nil
}

// Publish hands ev to the producer and returns; done is called exactly once,
// from another goroutine or (for a record refused before sending) before
// Publish returns, when the record is acknowledged (nil) or has failed for
// good (a *Error). Records are produced in the order of Publish calls; per
// partition Kafka keeps that order, also across retries (idempotence).
func (p *Producer) Publish(ev *outbox.Event, done func(error)) {
	if err := tooLarge(ev, p.maxRecordBytes, p.names); err != nil {
		done(err)
		return
	}
	rec := toRecord(ev)
	id := ev.ID()
	p.cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		if err == nil {
			done(nil)
			return
		}
		if errors.Is(err, kerr.MessageTooLarge) {
			// Only the broker can say this now: look up the topic's limit
			// for the error, off the producer's callback goroutine.
			p.explain.Go(func() error {
				done(&Error{ID: id, Topic: r.Topic, Err: p.brokerTooLarge(r.Topic, err)})
				return nil
			})
			return
		}
		done(&Error{ID: id, Topic: r.Topic, Err: explainUnknownTopic(err, p.names)})
	})
}

// explainUnknownTopic adds to an unknown-topic error what to do about it:
// outboxd creates no topic unless allowed to.
func explainUnknownTopic(err error, n field.Names) error {
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("%w (outboxd creates no topics: create it, or let the broker create unknown topics with %s)", err, n.Of("AllowAutoTopicCreation"))
	}
	return err
}

// EndTxn is a no-op: this producer acknowledges record by record.
func (p *Producer) EndTxn(context.Context, outbox.Commit) error { return nil }

// Abort fails every record not yet sent and waits for what is in flight:
// after a record failed for good, nothing queued behind it is written.
func (p *Producer) Abort(ctx context.Context) error {
	if err := p.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("aborting buffered Kafka records: %w", err)
	}
	return nil
}

// Withdraw fails every record not yet acknowledged, as Abort does, before
// the pipeline gives its slot up (pump.Withdrawer): an idempotent
// producer retries a record without limit, and a copy written after
// another replica took the slot over would land after that replica's
// newer records. It waits for the answers to the requests already sent
// (franz-go sends a request whose outcome it does not know again, to keep
// idempotence), until ctx ends; then it closes the client, which sends
// nothing more, and returns an error: the Producer fails every record
// from then on. Otherwise the client stays usable.
//
// Each pipeline owns its Producer and client, so that it can withdraw its
// own records: franz-go fails buffered records by client or by partition,
// never by who produced them.
func (p *Producer) Withdraw(ctx context.Context) error {
	err := p.cl.AbortBufferedRecords(ctx)
	if err == nil {
		return nil
	}
	p.closeClient()
	return fmt.Errorf("withdrawing the records Kafka has not acknowledged: requests already sent were not answered (%w); "+
		"the Kafka client is closed, so that it never sends them again", err)
}

// Ping checks that a broker answers.
func (p *Producer) Ping(ctx context.Context) error { return ping(ctx, p.cl) }

func ping(ctx context.Context, cl *kgo.Client) error {
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("reaching Kafka: %w", err)
	}
	return nil
}

// CheckTopic checks that topic exists, without creating it: ErrTopicMissing
// when the cluster says it does not; an error reaching Kafka is returned as
// such (the caller decides whether to wait).
func (p *Producer) CheckTopic(ctx context.Context, topic string) error {
	return checkTopic(ctx, p.cl, topic)
}

// checkTopic issues its own metadata request, with AllowAutoTopicCreation
// false: the client's metadata requests, kadm's included, carry the
// client's kgo.AllowAutoTopicCreation, and under it a broker with
// auto.create.topics.enable creates the topic it is asked about (and may
// still answer UNKNOWN_TOPIC_OR_PARTITION while it does).
func checkTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("reading Kafka's metadata for topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("%w: %s", ErrTopicMissing, topic)
		case err != nil:
			return fmt.Errorf("reading Kafka's metadata for topic %s: %w", topic, err)
		}
		return nil
	}
	return fmt.Errorf("%w: %s", ErrTopicMissing, topic)
}

// CreateTopic creates topic with the broker's defaults (num.partitions,
// default.replication.factor; Kafka 2.4+) through a CreateTopics request,
// which needs the CREATE ACL, not auto.create.topics.enable. It reports
// whether it created it: false, nil when the topic exists already.
func (p *Producer) CreateTopic(ctx context.Context, topic string) (bool, error) {
	return createTopic(ctx, p.cl, topic)
}

func createTopic(ctx context.Context, cl *kgo.Client, topic string) (bool, error) {
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, -1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("creating Kafka topic %s: %w", topic, err)
	}
	return true, nil
}

// ErrTopicMissing is CheckTopic's answer for a topic that does not exist.
var ErrTopicMissing = errors.New("Kafka topic does not exist")

// DataLossEvents counts the times Kafka reported lost records (see
// dataLossCounter).
func (p *Producer) DataLossEvents() uint64 { return p.dataLoss.n.Load() }

// dataLossCounter takes franz-go's report that the broker lost records it
// had acknowledged (OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID
// after a write, e.g. an unclean leader election): franz-go itself logs it
// only at debug level. Those records were confirmed to PostgreSQL already
// and are not sent again: an operator must know.
type dataLossCounter struct {
	log *slog.Logger
	n   atomic.Uint64
}

func (d *dataLossCounter) detected(topic string, partition int32) {
	d.n.Add(1)
	d.log.Error("Kafka reported data loss: records it had acknowledged on this partition are gone (an unclean leader election?); outboxd cannot re-send them, reconcile from the outbox table",
		"topic", topic, "partition", partition)
}

// Close closes the client; records still buffered fail with
// kgo.ErrClientClosed.
func (p *Producer) Close() {
	p.closeClient()
	_ = p.explain.Wait() // its goroutines return nil
}

func (p *Producer) closeClient() { p.closeOnce.Do(p.cl.Close) }

// brokerTooLarge builds the error for a record the broker refused as too
// large, with the topic's max.message.bytes when it can be read quickly.
func (p *Producer) brokerTooLarge(topic string, cause error) error {
	e := &TooLargeError{Cause: cause, Topic: topic}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfgs, err := kadm.NewClient(p.cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return e
	}
	for _, rc := range cfgs {
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				e.Limit, _ = strconv.Atoi(*c.Value)
			}
		}
	}
	return e
}

// wireSize bounds the size of a record batch holding only this record: the
// batch header (61 bytes and 4 of array length), the record's framing
// (at most 35 bytes of lengths and deltas) and 10 bytes per header.
func wireSize(ev *outbox.Event) int {
	return 100 + ev.Size() + 10*len(ev.Headers)
}

// Error is a record that failed for good.
type Error struct {
	ID    string // outbox id ("" when the record has no id header)
	Topic string
	Err   error
}

func (e *Error) Error() string {
	what := "outbox id " + e.ID
	if e.ID == "" {
		what = "a record without an id header"
	}
	return "publishing " + what + " to topic " + strconv.Quote(e.Topic) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// TooLargeError is a record over a size limit: the client's (refused before
// sending) or the broker's (MESSAGE_TOO_LARGE). It matches
// outbox.ErrRecordTooLarge and, for the broker's, kerr.MessageTooLarge.
type TooLargeError struct {
	Client bool // refused by outboxd's own limit, before sending
	Bytes  int  // client: the record's batch size
	Limit  int  // client: Config.MaxRecordBytes; broker: the topic's max.message.bytes (0 if unknown)
	// Setting names the client's limit as its user set it ("--max-record-bytes").
	Setting string
	Topic   string // broker
	Cause   error  // broker: the error franz-go reported
}

func (e *TooLargeError) Error() string {
	if e.Client {
		setting := e.Setting
		if setting == "" {
			setting = "MaxRecordBytes"
		}
		return fmt.Sprintf("record too large: it needs a batch of %d bytes, over %s %d (outboxd's limit, checked before sending)", e.Bytes, setting, e.Limit)
	}
	limit := "the topic's max.message.bytes (or the broker's message.max.bytes)"
	if e.Limit > 0 {
		limit = fmt.Sprintf("max.message.bytes %d of topic %s", e.Limit, e.Topic)
	}
	return fmt.Sprintf("record too large for the broker: over %s: %v", limit, e.Cause)
}

func (e *TooLargeError) Unwrap() []error {
	if e.Cause != nil {
		return []error{outbox.ErrRecordTooLarge, e.Cause}
	}
	return []error{outbox.ErrRecordTooLarge}
}
