package decode

import "github.com/outboxd/outboxd/harness/pgoutputtest"

// The tests' pgoutput messages, encoded by hand (package pgoutputtest).
type (
	msg = pgoutputtest.Msg
	tv  = pgoutputtest.Value
)

var (
	pgEpoch           = pgoutputtest.Epoch()
	text              = pgoutputtest.Text
	bin               = pgoutputtest.Bin
	null              = pgoutputtest.Null()
	unchanged         = pgoutputtest.Unchanged()
	encBegin          = pgoutputtest.Begin
	encCommit         = pgoutputtest.Commit
	encRelation       = pgoutputtest.Relation
	encInsert         = pgoutputtest.Insert
	encUpdate         = pgoutputtest.Update
	encDelete         = pgoutputtest.Delete
	encTruncate       = pgoutputtest.Truncate
	encType           = pgoutputtest.Type
	encOrigin         = pgoutputtest.Origin
	encLogicalMessage = pgoutputtest.LogicalMessage
	outboxColumns     = pgoutputtest.OutboxColumns
	outboxRelation    = pgoutputtest.OutboxRelation
	outboxInsert      = pgoutputtest.OutboxInsert
	testCommitTime    = pgoutputtest.CommitTime()
	testBegin         = pgoutputtest.TestBegin
	testCommit        = pgoutputtest.TestCommit
)

const outboxRelID = pgoutputtest.OutboxRelID
