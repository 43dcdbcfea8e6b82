package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twopc/twopc"
)

// progressEvery is how often a long pass reports on stderr.
var progressEvery = 2 * time.Second

// progress reports a long pass on stderr every progressEvery until ended.
type progress struct {
	stop chan struct{}
	done chan struct{}
}

// startProgress reports what, with describe's words, every progressEvery
// until end; nil (reporting nothing) if quiet.
func startProgress(w io.Writer, quiet bool, what string, describe func() string) *progress {
	if quiet {
		return nil
	}
	p := &progress{stop: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s: %v so far, %s\n", what, time.Since(start).Round(time.Second), describe())
			}
		}
	}()
	return p
}

// end stops the reports; none is written after it returns.
func (p *progress) end() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}

// stepCounter counts the library's steps, through its step hook, for
// progress reports. It never stops a step.
type stepCounter struct {
	mu    sync.Mutex
	steps map[twopc.Step]int
}

func (s *stepCounter) hook(_ context.Context, step twopc.Step, _ *twopc.Txn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steps == nil {
		s.steps = map[twopc.Step]int{}
	}
	s.steps[step]++
	return nil
}

// reset forgets the counts, for the next pass.
func (s *stepCounter) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = nil
}

// String lists the counts of the steps taken.
func (s *stepCounter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for step, n := range s.steps {
		parts = append(parts, fmt.Sprintf("%s %d", step, n))
	}
	if len(parts) == 0 {
		return "no step yet"
	}
	sort.Strings(parts)
	return "steps: " + strings.Join(parts, ", ")
}
