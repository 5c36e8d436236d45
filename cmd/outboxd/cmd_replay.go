package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/pipeline"
)

var replayGroups = []config.Group{
	config.GroupDatabase, config.GroupPrimary, config.GroupTable, config.GroupPublication, config.GroupColumns, config.GroupBackfillOrder,
	config.GroupReplay, config.GroupPump, config.GroupKafka, config.GroupDelivery, config.GroupRegistry, config.GroupLog,
}

const replaySynopsis = "Re-publishes rows still in the outbox table while the stream goes on: to rebuild a topic that\n" +
	"lost data, to give a new consumer group history, or to re-deliver after a downstream fix. The\n" +
	"rows --replay-from/--replay-to, --replay-since/--replay-until and --replay-where select (the\n" +
	"publication's row filter applies) are published as the stream made them, each key's in the\n" +
	"order they were written, with their id and outboxd.source headers (idempotent consumers skip\n" +
	"what they processed) and an outboxd.replay header naming the replay. It never touches the slot.\n" +
	"Progress is kept in outboxd_replays: stopped or killed, the same command resumes; two replays\n" +
	"of one table at once are refused. Give it the pipeline's column, Kafka and delivery flags."

// replayFlags builds replay's flags on cfg.
func replayFlags(cfg *config.Config, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("replay", replaySynopsis, stderr)
	cfg.Register(fs, replayGroups...)
	return fs
}

// cmdReplay re-publishes selected rows of the outbox table (cdc.Replayer).
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := replayFlags(&cfg, stderr)
	if code, ok := parseFlags("replay", fs, args, stderr, getenv); !ok {
		return code
	}
	cfg.ApplyLayout(fs)
	if code, ok := validate("replay", &cfg, fs, stderr); !ok {
		return code
	}
	log := cfg.Logger(stderr)
	pc, err := cfg.Pipeline(log)
	if err != nil {
		log.Error("outboxd replay failed", "err", err)
		return exitError
	}
	rc := cfg.Replay
	s := pc.Stream
	rc.DatabaseURL, rc.PrimaryURL, rc.Publication, rc.Table = s.DatabaseURL, s.PrimaryURL, s.Publication, cfg.Outbox.Table
	rc.Columns, rc.Source, rc.BackfillOrderColumn = s.Columns, s.Source, s.BackfillOrderColumn
	rc.Names = replayNames(cfg.SettingNames())
	rc = rc.WithDefaults()
	rp, err := pipeline.NewReplay(pc, rc, log)
	if err != nil {
		fmt.Fprintf(stderr, "outboxd replay: invalid configuration:\n%v\n", err)
		return exitUsage
	}
	stopBar := showProgress(stderr, rp.Progress)
	err = rp.Run(ctx)
	stopBar()
	p := rp.Progress()
	if p.Remains != "" {
		fmt.Fprintf(stdout, "pruned: the selection reaches below the table's first row; those rows cannot be replayed. The table holds %s\n", p.Remains)
	}
	switch {
	case err != nil:
		log.Error("outboxd replay failed", "replay", rc.Name, "err", err)
		fmt.Fprintf(stdout, "replay %s: %d of %d rows acknowledged by Kafka before it failed; run it again to resume\n", rc.Name, p.Acked, p.Total)
		return exitError
	case rc.DryRun:
		fmt.Fprintf(stdout, "replay %s would publish %d rows (%s)\n", rc.Name, p.Total-p.Acked, rc.Describe())
	case ctx.Err() != nil:
		fmt.Fprintf(stdout, "replay %s stopped: %d of %d rows acknowledged by Kafka; run the same command to resume\n", rc.Name, p.Acked, p.Total)
	default:
		fmt.Fprintf(stdout, "replay %s: %d of %d rows acknowledged by Kafka\n", rc.Name, p.Acked, p.Total)
	}
	return exitOK
}

// showProgress draws a progress bar on w while it is a terminal, and
// returns what stops it; elsewhere the replay's own progress log lines
// (every 10 s) say how far it got.
func showProgress(w io.Writer, progress func() cdc.ReplayProgress) (stop func()) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	done := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintf(w, "\r%s\n", progressBar(progress()))
				return nil
			case <-t.C:
				fmt.Fprintf(w, "\r%s", progressBar(progress()))
			}
		}
	})
	return func() { close(done); _ = g.Wait() }
}

// progressBar is one line: a bar of the rows acknowledged, and counts.
func progressBar(p cdc.ReplayProgress) string {
	const width = 30
	filled := 0
	if p.Total > 0 {
		filled = int(min(p.Acked, p.Total) * width / p.Total)
	}
	return fmt.Sprintf("[%s%s] %d/%d acknowledged, %d sent", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.Acked, p.Total, p.Done)
}

// replayNames renders a cdc.ReplayConfig's settings by the flags that set
// them: the pipeline's own (--table, the column flags, ...) or replay's.
func replayNames(n field.Names) field.Names {
	return n.Renamed(func(path string) string {
		switch top, _, _ := strings.Cut(path, "."); top {
		case "DatabaseURL", "PrimaryURL", "Publication", "Table", "Columns", "Source", "BackfillOrderColumn":
			return "Stream." + path
		}
		return "Replay." + path
	})
}
