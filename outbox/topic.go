package outbox

import (
	"errors"
	"fmt"
)

// maxTopicLen is the longest topic name Kafka accepts.
const maxTopicLen = 249

// ValidTopic checks a topic name as Kafka does: 1 to 249 ASCII letters,
// digits, '.', '_' and '-', and not "." or "..".
func ValidTopic(name string) error {
	switch {
	case name == "":
		return errors.New("empty topic name")
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case len(name) > maxTopicLen:
		return fmt.Errorf("topic name of %d bytes: Kafka allows at most %d", len(name), maxTopicLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %q: Kafka allows only ASCII letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}
