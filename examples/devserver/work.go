package devserver

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Work is the backend's time on one kind of request: a command name on one
// collection, measured by the [Front] while it held its lock, from sending
// the request (the first statement of a write command) to reading the last
// reply. Since the front lets one request through at a time, Busy is the
// server's own time, without the time a request waited for the lock; the
// sum over all kinds is how long the backend was busy.
type Work struct {
	Command    string `json:"command"`
	Collection string `json:"collection,omitempty"` // "" for a command that names none
	// Requests is the number of client requests of this kind.
	Requests uint64 `json:"requests"`
	// Statements is the number of statements they carried: one per update,
	// delete or insert statement the front ran, one for any other request.
	Statements uint64 `json:"statements"`
	// Busy is the backend's time on them, in nanoseconds in JSON.
	Busy time.Duration `json:"busy_ns"`
}

// workKey is a Work's kind.
type workKey struct{ command, collection string }

// workLog sums a front's Work. Its lock is its own: Work may be read while
// a request is at the backend.
type workLog struct {
	mu    sync.Mutex
	kinds map[workKey]*Work
}

// add records one request of the given kind that carried statements and
// kept the backend busy for busy.
func (l *workLog) add(command, collection string, statements int, busy time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := workKey{command, collection}
	w := l.kinds[k]
	if w == nil {
		if l.kinds == nil {
			l.kinds = make(map[workKey]*Work)
		}
		w = &Work{Command: command, Collection: collection}
		l.kinds[k] = w
	}
	w.Requests++
	w.Statements += uint64(statements)
	w.Busy += busy
}

// list returns a copy of every kind, the busiest first.
func (l *workLog) list() []Work {
	l.mu.Lock()
	out := make([]Work, 0, len(l.kinds))
	for _, w := range l.kinds {
		out = append(out, *w)
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b Work) int {
		if c := cmp.Compare(b.Busy, a.Busy); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Command, b.Command), cmp.Compare(a.Collection, b.Collection))
	})
	return out
}

// reset forgets everything recorded so far.
func (l *workLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kinds = nil
}
