package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/bench/internal/receipts"
)

// slotStream is one slot read through its own replication connection.
type slotStream struct {
	url, slot, publication string
	status                 time.Duration
	tally                  *receipts.Tally
}

// run streams the slot from its confirmed position until ctx ends, then
// confirms what it received and closes the connection.
func (s slotStream) run(ctx context.Context) error {
	cfg, err := pgconn.ParseConfig(s.url)
	if err != nil {
		return fmt.Errorf("slot %s: parsing its database URL: %w", s.slot, err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("slot %s: connecting: %w", s.slot, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pglogrepl.StartReplication(ctx, conn, s.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", s.publication)},
	})
	if err != nil {
		return fmt.Errorf("starting replication on slot %s: %w", s.slot, err)
	}
	// Reads carry no context, so that pgconn watches none per message:
	// ctx's end cuts the blocked read short through the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var received pglogrepl.LSN // the end of the last transaction received
	confirm := func() error {
		return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: received})
	}
	next := time.Now().Add(s.status)
	inserts := 0 // of the transaction being received
	for {
		msg, err := conn.ReceiveMessage(context.Background())
		if ctx.Err() != nil {
			// Confirm what was received, as a stopping client does.
			_ = conn.Conn().SetReadDeadline(time.Time{})
			_ = pglogrepl.SendStandbyStatusUpdate(context.WithoutCancel(ctx), conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: received})
			return nil
		}
		if err != nil {
			return fmt.Errorf("slot %s: receiving: %w", s.slot, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if e, isErr := msg.(*pgproto3.ErrorResponse); isErr {
				return fmt.Errorf("slot %s: %w", s.slot, pgconn.ErrorResponseToPgError(e))
			}
			return fmt.Errorf("slot %s: unexpected %T", s.slot, msg)
		}
		if len(cd.Data) == 0 {
			return errors.New("slot " + s.slot + ": an empty CopyData")
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return fmt.Errorf("slot %s: %w", s.slot, err)
			}
			if k.ReplyRequested {
				if err := confirm(); err != nil {
					return fmt.Errorf("slot %s: answering a keepalive: %w", s.slot, err)
				}
				next = time.Now().Add(s.status)
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return fmt.Errorf("slot %s: %w", s.slot, err)
			}
			if len(x.WALData) == 0 {
				continue
			}
			switch pglogrepl.MessageType(x.WALData[0]) {
			case pglogrepl.MessageTypeInsert:
				inserts++
			case pglogrepl.MessageTypeCommit:
				m, err := pglogrepl.Parse(x.WALData)
				if err != nil {
					return fmt.Errorf("slot %s: %w", s.slot, err)
				}
				c := m.(*pglogrepl.CommitMessage)
				s.tally.Add(inserts, time.Since(c.CommitTime))
				inserts, received = 0, c.TransactionEndLSN
			}
		}
		if time.Now().After(next) {
			if err := confirm(); err != nil {
				return fmt.Errorf("slot %s: confirming: %w", s.slot, err)
			}
			next = time.Now().Add(s.status)
		}
	}
}
