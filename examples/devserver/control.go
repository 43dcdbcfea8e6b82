package devserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// FaultRequest is the JSON body of POST /faults; see [ControlHandler].
// Its fields are those of [Fault], with Delay as a Go duration string.
type FaultRequest struct {
	Command     string  `json:"command"`     // see Fault.Command
	Kind        Kind    `json:"kind"`        // drop_before_forward, drop_after_forward or delay
	Probability float64 `json:"probability"` // see Fault.Probability
	Count       int     `json:"count"`       // see Fault.Count
	Delay       string  `json:"delay"`       // Go duration, such as "50ms"
	Seed        uint64  `json:"seed"`        // see Fault.Seed
}

// Fault converts the request to a [Fault].
func (r FaultRequest) Fault() (Fault, error) {
	var delay time.Duration
	if r.Delay != "" {
		d, err := time.ParseDuration(r.Delay)
		if err != nil {
			return Fault{}, fmt.Errorf("devserver: fault delay: %w", err)
		}
		delay = d
	}
	f := Fault{
		Command:     r.Command,
		Kind:        r.Kind,
		Probability: r.Probability,
		Count:       r.Count,
		Delay:       delay,
		Seed:        r.Seed,
	}
	return f, f.Validate()
}

// faultJSON is one rule in the GET /faults answer.
type faultJSON struct {
	ID          uint64  `json:"id"`
	Command     string  `json:"command"`
	Kind        Kind    `json:"kind"`
	Probability float64 `json:"probability"`
	Count       int     `json:"count"`
	Remaining   int     `json:"remaining"`
	Delay       string  `json:"delay,omitempty"`
	Seed        uint64  `json:"seed,omitempty"`
}

// ControlHandler returns an HTTP handler that drives front's faults with
// JSON, for tests in modules that cannot import this package:
//
//	POST   /faults       body {"command":"update","kind":"drop_after_forward",
//	                     "probability":0.1,"count":0,"delay":"50ms","seed":1}
//	                     → 200 {"id":N}; every field but kind is optional,
//	                     see [Fault] for their meaning
//	GET    /faults       → 200 [{"id":N,"command":...,"remaining":N,...}]
//	DELETE /faults       → 204, removes all rules
//	DELETE /faults/{id}  → 204, or 404 if no such rule
//	GET    /stats        → 200 {"forwarded":N,"drop_before_forward":N,
//	                     "drop_after_forward":N,"delay":N}
//	GET    /work         → 200 [{"command":"update","collection":"accounts",
//	                     "requests":N,"statements":N,"busy_ns":N}, ...]:
//	                     the backend's time by kind, see [Front.Work]
//	DELETE /work         → 204, starts counting it again
//
// Errors are answered with a 4xx status and {"error":"..."}.
func ControlHandler(front *Front) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var req FaultRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("devserver: decoding fault: %w", err))
			return
		}
		fault, err := req.Fault()
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		id, err := front.AddFault(fault)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]uint64{"id": id})
	})
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, r *http.Request) {
		rules := front.Faults()
		out := make([]faultJSON, 0, len(rules))
		for _, s := range rules {
			fj := faultJSON{
				ID:          s.ID,
				Command:     s.Fault.Command,
				Kind:        s.Fault.Kind,
				Probability: s.Fault.Probability,
				Count:       s.Fault.Count,
				Remaining:   s.Remaining,
				Seed:        s.Fault.Seed,
			}
			if s.Fault.Delay > 0 {
				fj.Delay = s.Fault.Delay.String()
			}
			out = append(out, fj)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		front.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("devserver: fault id: %w", err))
			return
		}
		if !front.RemoveFault(id) {
			writeError(w, http.StatusNotFound, errors.New("devserver: no such fault"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, front.Stats())
	})
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, front.Work())
	})
	mux.HandleFunc("DELETE /work", func(w http.ResponseWriter, r *http.Request) {
		front.ResetWork()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
