package devserver

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Kind is what a [Fault] does to a request it applies to.
type Kind int

const (
	// DropBeforeForward closes the client connection without forwarding the
	// request: the server never sees it and the client gets a network error.
	DropBeforeForward Kind = iota + 1

	// DropAfterForward forwards the request, waits for the server to apply it
	// and reply (to every statement of a write command the front runs
	// statement by statement), then closes the client connection without
	// relaying the reply:
	// the client gets a network error although the write happened (the
	// ambiguous write). A request that expects no reply (OP_MSG moreToCome)
	// is dropped right after it is forwarded.
	DropAfterForward

	// Delay forwards the request and reads the reply as usual, then waits
	// [Fault.Delay] before relaying the reply. Other requests proceed while it
	// waits.
	Delay
)

// String returns the kind's name as used by the control API:
// drop_before_forward, drop_after_forward or delay.
func (k Kind) String() string {
	switch k {
	case DropBeforeForward:
		return "drop_before_forward"
	case DropAfterForward:
		return "drop_after_forward"
	case Delay:
		return "delay"
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// ParseKind returns the Kind named s (see [Kind.String]).
func ParseKind(s string) (Kind, error) {
	for _, k := range []Kind{DropBeforeForward, DropAfterForward, Delay} {
		if s == k.String() {
			return k, nil
		}
	}
	return 0, fmt.Errorf("devserver: unknown fault kind %q (want drop_before_forward, drop_after_forward or delay)", s)
}

// MarshalText implements [encoding.TextMarshaler].
func (k Kind) MarshalText() ([]byte, error) {
	if _, err := ParseKind(k.String()); err != nil {
		return nil, err
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (k *Kind) UnmarshalText(b []byte) error {
	parsed, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}

// Fault is a rule that makes the [Front] misbehave on matching requests.
//
// A request matches when its command name equals Command (compared without
// regard to case), or for any command when Command is empty. Handshake,
// authentication and monitoring commands (hello, isMaster, buildInfo, ping,
// saslStart, ...) only match a rule that names them explicitly, so that
// drivers can still connect while a catch-all rule is active.
type Fault struct {
	// Command is the command name to match, such as "update" or
	// "findAndModify"; empty matches every command except handshake and
	// monitoring ones.
	Command string

	// Kind is what to do with a matching request.
	Kind Kind

	// Probability is the chance, from 0 to 1, that the rule applies to a
	// matching request. 0 means always, the same as 1.
	Probability float64

	// Count is how many times the rule applies before it is exhausted and
	// removed; 0 means no limit. With a Probability below 1, only requests
	// the rule actually applies to are counted.
	Count int

	// Delay is how long a Delay fault holds the reply back. Required (> 0)
	// for Kind Delay, ignored otherwise.
	Delay time.Duration

	// Seed, when non-zero, gives the rule its own random source seeded with
	// it, so a run that sends the same requests in the same order gets the
	// same faults. When zero the rule uses the Front's random source.
	Seed uint64
}

// Validate reports whether the rule is well formed.
func (f Fault) Validate() error {
	if f.Kind == 0 {
		return errors.New("devserver: fault kind is required")
	}
	if _, err := ParseKind(f.Kind.String()); err != nil {
		return err
	}
	if math.IsNaN(f.Probability) || f.Probability < 0 || f.Probability > 1 {
		return fmt.Errorf("devserver: fault probability %v is not in [0, 1]", f.Probability)
	}
	if f.Count < 0 {
		return fmt.Errorf("devserver: fault count %d is negative", f.Count)
	}
	if f.Kind == Delay && f.Delay <= 0 {
		return errors.New("devserver: a delay fault needs a positive delay")
	}
	if f.Delay < 0 {
		return fmt.Errorf("devserver: fault delay %v is negative", f.Delay)
	}
	return nil
}

// protectedCommands are never faulted unless a rule names them explicitly:
// without them a driver cannot connect, authenticate or monitor the server.
// Keys are lower case.
var protectedCommands = map[string]struct{}{
	"hello":        {},
	"ismaster":     {},
	"buildinfo":    {},
	"ping":         {},
	"saslstart":    {},
	"saslcontinue": {},
	"authenticate": {},
	"getnonce":     {},
	"endsessions":  {},
}

// matches reports whether a request for command is subject to the rule.
func (f *Fault) matches(command string) bool {
	if f.Command != "" {
		return strings.EqualFold(f.Command, command)
	}
	_, protected := protectedCommands[strings.ToLower(command)]
	return !protected
}

// rule is an installed Fault with its bookkeeping.
type rule struct {
	id        uint64
	fault     Fault
	remaining int        // applications left when fault.Count > 0
	rng       *rand.Rand // nil: use the set's source
}

// faultSet holds the Front's rules. It is safe for concurrent use.
type faultSet struct {
	mu     sync.Mutex
	rng    *rand.Rand
	nextID uint64
	rules  []*rule
}

func newFaultSet(seed uint64) *faultSet {
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &faultSet{rng: rand.New(rand.NewPCG(seed, seed))}
}

func (s *faultSet) add(f Fault) (uint64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	r := &rule{id: s.nextID, fault: f, remaining: f.Count}
	if f.Seed != 0 {
		r.rng = rand.New(rand.NewPCG(f.Seed, f.Seed))
	}
	s.rules = append(s.rules, r)
	return r.id, nil
}

func (s *faultSet) remove(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.rules {
		if r.id == id {
			s.rules = append(s.rules[:i], s.rules[i+1:]...)
			return true
		}
	}
	return false
}

func (s *faultSet) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
}

// FaultStatus is an installed fault rule as reported by [Front.Faults].
type FaultStatus struct {
	// ID identifies the rule for [Front.RemoveFault].
	ID uint64
	// Fault is the rule as it was added.
	Fault Fault
	// Remaining is how many more times the rule applies; 0 when the rule's
	// Count is 0 (no limit).
	Remaining int
}

func (s *faultSet) list() []FaultStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FaultStatus, 0, len(s.rules))
	for _, r := range s.rules {
		out = append(out, FaultStatus{ID: r.id, Fault: r.fault, Remaining: r.remaining})
	}
	return out
}

// pick decides which fault, if any, applies to a request for command. Rules
// are tried in the order they were added; the first that matches and fires
// applies, and an exhausted rule is removed.
func (s *faultSet) pick(command string) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.rules {
		if !r.fault.matches(command) {
			continue
		}
		if p := r.fault.Probability; p > 0 && p < 1 {
			rng := r.rng
			if rng == nil {
				rng = s.rng
			}
			if rng.Float64() >= p {
				continue
			}
		}
		if r.fault.Count > 0 {
			r.remaining--
			if r.remaining == 0 {
				s.rules = append(s.rules[:i], s.rules[i+1:]...)
			}
		}
		return r.fault, true
	}
	return Fault{}, false
}
