package mongotest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Fault kinds understood by the dev server's front.
const (
	// DropBeforeForward closes the client's connection without forwarding
	// the request: the write did not happen.
	DropBeforeForward = "drop_before_forward"
	// DropAfterForward forwards the request, lets it apply, then closes the
	// client's connection without the reply: the ambiguous write.
	DropAfterForward = "drop_after_forward"
	// Delay relays the reply late.
	Delay = "delay"
)

// Fault is one fault rule for the dev server's front.
type Fault struct {
	// Command is the command name the rule applies to ("" for any data
	// command).
	Command string `json:"command,omitempty"`
	// Kind is DropBeforeForward, DropAfterForward or Delay.
	Kind string `json:"kind"`
	// Probability is the chance a matching request is hit (0 means 1 when
	// Count is set).
	Probability float64 `json:"probability,omitempty"`
	// Count is how many matching requests are hit before the rule is spent
	// (0: no limit).
	Count int `json:"count,omitempty"`
	// Delay is how late a reply is relayed, for Kind Delay.
	Delay time.Duration `json:"-"`
	// Seed seeds the rule's random choices.
	Seed int64 `json:"seed,omitempty"`
}

// FaultStats counts what the front has done.
type FaultStats struct {
	Forwarded         int64 `json:"forwarded"`
	DropBeforeForward int64 `json:"drop_before_forward"`
	DropAfterForward  int64 `json:"drop_after_forward"`
	Delay             int64 `json:"delay"`
}

// Faults drives a dev server's fault front over its control API.
type Faults struct {
	base string
	// pid is the dev server's process id, 0 if not known.
	pid int
}

// CPU returns the CPU time the dev server's process has used so far
// (the sum of its threads' time on a CPU, from Linux's
// /proc/<pid>/task/*/schedstat), and whether it is known. On a shared
// machine it varies less with the load than the server's busy time.
func (f *Faults) CPU() (time.Duration, bool) {
	if f == nil || f.pid == 0 {
		return 0, false
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", f.pid))
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err != nil {
			return 0, false
		}
		total += time.Duration(ns)
	}
	return total, true
}

// Add installs a fault rule.
func (f *Faults) Add(ctx context.Context, fault Fault) error {
	body := struct {
		Fault
		Delay string `json:"delay,omitempty"`
	}{Fault: fault}
	if fault.Delay > 0 {
		body.Delay = fault.Delay.String()
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return f.do(ctx, http.MethodPost, "/faults", b, nil)
}

// Clear removes every fault rule.
func (f *Faults) Clear(ctx context.Context) error {
	return f.do(ctx, http.MethodDelete, "/faults", nil, nil)
}

// Stats returns the front's counters.
func (f *Faults) Stats(ctx context.Context) (FaultStats, error) {
	var s FaultStats
	err := f.do(ctx, http.MethodGet, "/stats", nil, &s)
	return s, err
}

// Work is the dev server's time on one kind of request (command and
// collection), measured by its front; see the dev server's Front.Work.
type Work struct {
	Command    string        `json:"command"`
	Collection string        `json:"collection"`
	Requests   int64         `json:"requests"`
	Statements int64         `json:"statements"`
	Busy       time.Duration `json:"busy_ns"`
}

// Work returns the dev server's time on each kind of request since it
// started or the last ResetWork, the busiest first.
func (f *Faults) Work(ctx context.Context) ([]Work, error) {
	var w []Work
	err := f.do(ctx, http.MethodGet, "/work", nil, &w)
	return w, err
}

// ResetWork starts counting the dev server's time again.
func (f *Faults) ResetWork(ctx context.Context) error {
	return f.do(ctx, http.MethodDelete, "/work", nil, nil)
}

func (f *Faults) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, f.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fault control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("fault control %s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
