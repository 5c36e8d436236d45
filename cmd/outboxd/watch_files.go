package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// settingFilesPoll is how often run --config reads the files the
// pipelines' settings come from (a database URL or password in a mounted
// secret): one rotated in place is taken up by a reload within that,
// which restarts only the pipelines whose settings changed. Kubernetes
// updates a mounted secret within about a minute of its change.
const settingFilesPoll = 10 * time.Second

// watchFiles reads the files files() names every every, and sends the
// ones whose content changed since the last look on changed (dropped when
// a send is still pending: the reload it asks for reads every file),
// until ctx ends. A file that cannot be read counts as a content of its
// own: its disappearance is a change, and its return another.
func watchFiles(ctx context.Context, files func() []string, every time.Duration, changed chan<- []string) {
	sums := map[string][]byte{}
	sum := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			return []byte("unreadable: " + err.Error())
		}
		s := sha256.Sum256(b)
		return s[:]
	}
	for _, f := range files() {
		sums[f] = sum(f)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var diff []string
		now := map[string][]byte{}
		for _, f := range files() {
			now[f] = sum(f)
			if old, ok := sums[f]; ok && !bytes.Equal(old, now[f]) {
				diff = append(diff, f)
			}
		}
		sums = now
		if len(diff) == 0 {
			continue
		}
		select {
		case changed <- diff:
		default:
		}
	}
}
