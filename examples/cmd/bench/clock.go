package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/twopc/twopc/examples/devserver"
)

// workClock is the dev server front's clock of its backend's work (see
// devserver.Front.Work): the in-process front's, or an out-of-process dev
// server's through its control API (-control).
type workClock interface {
	resetWork(ctx context.Context) error
	work(ctx context.Context) ([]devserver.Work, error)
}

// frontClock reads the in-process dev server's front.
type frontClock struct{ f *devserver.Front }

func (c frontClock) resetWork(context.Context) error { c.f.ResetWork(); return nil }

func (c frontClock) work(context.Context) ([]devserver.Work, error) { return c.f.Work(), nil }

// controlClock reads a dev server's control API: GET /work, DELETE /work
// (cmd/devserver -control).
type controlClock struct{ base string }

func newControlClock(base string) controlClock {
	return controlClock{base: strings.TrimSuffix(base, "/")}
}

func (c controlClock) do(ctx context.Context, method string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/work", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s/work: %s", method, c.base, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c controlClock) resetWork(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, nil)
}

func (c controlClock) work(ctx context.Context) ([]devserver.Work, error) {
	var w []devserver.Work
	err := c.do(ctx, http.MethodGet, &w)
	return w, err
}
