package registry_test

import (
	"testing"

	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/registry/decoder"
)

// The consumers' decoder keeps a default of its own, so that it need not
// import the stage; it must wait for the registry as long as the stage
// does, or one registry setting would mean two things.
func TestTheDecoderWaitsAsLongAsTheStage(t *testing.T) {
	if decoder.DefaultRequestTimeout != registry.DefaultRequestTimeout {
		t.Errorf("decoder.DefaultRequestTimeout = %v, registry.DefaultRequestTimeout = %v", decoder.DefaultRequestTimeout, registry.DefaultRequestTimeout)
	}
}
