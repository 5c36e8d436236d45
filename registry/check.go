package registry

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outboxd/outboxd/format"
)

// SubjectCheck is what Check found of the schema one side of a record
// would use.
type SubjectCheck struct {
	Side    string // "value" or "key"
	Subject string // the subject ("" when the schema is pinned by id)
	// Err is nil when the registry holds a schema of the side's format
	// that parses (SchemaID and Version say which); else why not (a
	// *SubjectMissingError when the subject does not exist).
	Err               error
	SchemaID, Version int
}

// CheckResult is what Check found.
type CheckResult struct {
	Subjects []SubjectCheck
	// PerTopic: a side's subject follows from each record's topic (the
	// topic and topic-record strategies) and some topics are not known
	// ahead: those subjects are asked for as records come.
	PerTopic bool
	// AutoRegister: the schemas are registered at first use, so that no
	// subject needs to exist ahead.
	AutoRegister bool
}

// Check asks the registry, registering nothing, for the schema each side
// with a schema format would use on each of topics (the topics known
// ahead) as the stage resolves it: the pinned id, the pinned version, or
// the latest, its references and that it parses. perTopicUnknown says
// there are topics besides these (a topic template or column). Its error
// is the registry not answering or refusing the credentials at all.
func Check(ctx context.Context, cfg Config, topics []string, perTopicUnknown bool) (CheckResult, error) {
	var res CheckResult
	s, err := New(cfg, nil, slog.New(slog.DiscardHandler)) // it hands nothing on
	if err != nil {
		return res, err
	}
	if _, err := s.cl.Subjects(ctx); err != nil {
		return res, describe("its subjects", err)
	}
	res.AutoRegister = s.cfg.AutoRegister
	if res.AutoRegister {
		return res, nil
	}
	seen := map[subjectKey]bool{}
	for _, side := range []struct {
		key  bool
		side Side
	}{{false, s.cfg.Value}, {true, s.cfg.Key}} {
		if side.side.Format == format.JSON {
			continue
		}
		perTopic := side.side.ID == 0 && s.cfg.SubjectStrategy != RecordName
		res.PerTopic = res.PerTopic || perTopic && perTopicUnknown
		names := topics
		if !perTopic {
			names = []string{""} // one subject (or id) for every topic
		}
		for _, topic := range names {
			k := subjectKey{subject: s.subject(topic, side.key, side.side), key: side.key}
			if side.side.ID != 0 {
				k.subject = ""
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			c := SubjectCheck{Side: sideName(side.key), Subject: k.subject}
			e, err := s.resolve(ctx, k, side.side)
			if err != nil {
				c.Err = err
			} else {
				c.SchemaID, c.Version = e.id, e.version
			}
			res.Subjects = append(res.Subjects, c)
		}
	}
	return res, nil
}

func (c SubjectCheck) String() string {
	if c.Subject == "" {
		return fmt.Sprintf("%s schema id", c.Side)
	}
	return fmt.Sprintf("%s subject %s", c.Side, c.Subject)
}
