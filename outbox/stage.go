package outbox

import "context"

// Stage takes a stream's changes, in stream order, and hands them on:
// the pump (package pump), or a stage in front of it (package registry's,
// which encodes records per their registered schemas). The stream
// (package cdc) hands its changes to the first stage of its pipeline.
type Stage interface {
	// Apply takes one change. While the room for records in flight is
	// full it waits; when ctx ends meanwhile it returns ctx's error having
	// taken nothing (the change is offered again). Any other error is
	// permanent: the pipeline stops.
	Apply(ctx context.Context, c Change) error
	// Reject takes, in the place of a record, a row that cannot become
	// one (dead-lettered, or a permanent error). Errors as for Apply.
	Reject(ctx context.Context, re *RowError) error
}
