package config

import (
	"slices"
	"testing"
)

// Regression (issue 37): nothing kept a row from naming the progress topic
// or the dead-letter topic; the mapping run hands the decoder must reserve
// them whatever the delivery mode (another outboxd on the cluster may keep
// its exactly-once progress in the default topic).
func TestMappingReservesOutboxdsOwnTopics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"defaults", nil, []string{"outboxd.progress"}},
		{"a dead-letter topic", []string{"--dead-letter-topic", "dead"}, []string{"outboxd.progress", "dead"}},
		{"another progress topic", []string{"--delivery", "exactly-once", "--progress-topic", "mine.progress"},
			[]string{"mine.progress", "outboxd.progress"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := parsed(t, tt.args, nil, GroupColumns, GroupPump, GroupDelivery)
			if got := c.Mapping().ReservedTopics; !slices.Equal(got, tt.want) {
				t.Errorf("reserved topics %q, want %q", got, tt.want)
			}
		})
	}
}
