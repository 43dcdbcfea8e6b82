package main

// What twopc status says of the change feeds.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/twopc/twopc"
)

// feedStatusJSON is a feed as status prints it (Feed.Status).
type feedStatusJSON struct {
	Name      string     `json:"name"`
	Since     time.Time  `json:"since"`     // it numbers the events since (the log server's clock)
	Published int64      `json:"published"` // the last batch readers may read
	Epoch     int64      `json:"epoch"`     // raised by each takeover of its sequencer
	Holder    string     `json:"holder"`    // the sequencer holding the lease; "" if none
	LeaseEnds *time.Time `json:"leaseEnds"` // when the holder's lease lapses unless renewed; null if none holds it
	Takeovers int        `json:"takeovers"`
	// Waiting counts the transactions whose events wait to be numbered:
	// how far the sequencer is behind, counted up to what one round of a
	// sequencer takes (1000 at most). 0 for a deleted feed (not counted).
	Waiting int   `json:"waiting"`
	Gone    int64 `json:"gone"` // the last batch history moved transactions of: positions before it are truncated
	Deleted bool  `json:"deleted"`
	// Groups are its subscriber groups: each one's saved position and how
	// far behind the feed its handler is.
	Groups []groupStatusJSON `json:"groups"`
	// Error says why the feed could not be read: a document whose name
	// the library refuses (written by hand, or by another program).
	Error string `json:"error,omitempty"`
}

// groupStatusJSON is a subscriber group as status prints it
// (FeedStatus.Groups).
type groupStatusJSON struct {
	Name     string `json:"name"`
	Position string `json:"position"` // the position it saved: every event before it acknowledged
	// Behind counts the published events it has not acknowledged, up to
	// 1000 (MaxFeedBehind).
	Behind int        `json:"behind"`
	Oldest *time.Time `json:"oldest"` // the oldest of those events' time; null if none
	// OldestAge is how long the oldest has waited, by the server's clock
	// then (serverTime): null if none waits.
	OldestAge *float64 `json:"oldestAgeSeconds"`
	Truncated bool     `json:"truncated"` // history moved events it had not acknowledged
	Holder    string   `json:"holder"`    // the subscriber holding its lease; "" if none
}

// feedStatuses is each feed of the log, deleted ones too, as status lists
// them, the groups' ages by the server's clock now.
func feedStatuses(ctx context.Context, cn *conn, now time.Time) ([]feedStatusJSON, error) {
	c, err := cn.coordinator()
	if err != nil {
		return nil, err
	}
	defer func() { _ = closeCoordinator(c) }()
	names, err := c.Feeds(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]feedStatusJSON, 0, len(names))
	for _, name := range names {
		st, err := c.Feed(name).Status(ctx)
		if errors.Is(err, twopc.ErrInvalidFeed) {
			out = append(out, feedStatusJSON{Name: name, Error: err.Error()})
			continue
		}
		if err != nil {
			return nil, err
		}
		f := feedStatusOf(st, now)
		out = append(out, f)
	}
	return out, nil
}

// feedStatusOf is st as status prints it, the groups' ages by the
// server's clock now.
func feedStatusOf(st *twopc.FeedStatus, now time.Time) feedStatusJSON {
	f := feedStatusJSON{Name: st.Name, Since: st.Since, Published: st.Published, Epoch: st.Epoch, Holder: st.Holder,
		Takeovers: st.Takeovers, Waiting: st.Waiting, Gone: st.Gone, Deleted: st.Deleted}
	if st.Holder != "" {
		ends := st.LeaseEnds
		f.LeaseEnds = &ends
	}
	f.Groups = []groupStatusJSON{}
	for _, g := range st.Groups {
		gj := groupStatusJSON{Name: g.Name, Position: string(g.Position), Behind: g.Behind, Truncated: g.Truncated, Holder: g.Holder}
		if !g.Oldest.IsZero() {
			oldest, waited := g.Oldest, max(0, now.Sub(g.Oldest).Seconds())
			gj.Oldest, gj.OldestAge = &oldest, &waited
		}
		f.Groups = append(f.Groups, gj)
	}
	return f
}

// printFeeds is status's section of the feeds, by the server's clock now.
func printFeeds(w io.Writer, feeds []feedStatusJSON, now time.Time) {
	if len(feeds) == 0 {
		fmt.Fprintln(w, "No change feeds.")
		return
	}
	fmt.Fprintln(w, "Change feeds (twopc help feed):")
	tw := table(w)
	fmt.Fprintln(tw, "  FEED\tPUBLISHED\tEPOCH\tSEQUENCER\tLEASE ENDS\tTAKEOVERS\tWAITING\tDELETED")
	for _, f := range feeds {
		if f.Error != "" {
			fmt.Fprintf(tw, "  %s\t(%s)\n", f.Name, f.Error)
			continue
		}
		holder, ends := "none", "-"
		if f.LeaseEnds != nil {
			holder = f.Holder
			if f.LeaseEnds.After(now) {
				ends = fmt.Sprintf("%s (in %v)", timestamp(*f.LeaseEnds), age(*f.LeaseEnds, now))
			} else {
				ends = fmt.Sprintf("%s (lapsed %v ago)", timestamp(*f.LeaseEnds), age(now, *f.LeaseEnds))
			}
		}
		waiting, deleted := fmt.Sprint(f.Waiting), "no"
		if f.Deleted {
			waiting, deleted = "-", "yes"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", f.Name, f.Published, f.Epoch, holder, ends, f.Takeovers, waiting, deleted)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  (WAITING: transactions whose events wait to be numbered, how far the sequencer is behind; the count stops at 1000.)")
	printGroups(w, feeds, now)
}

// feedStatusReport is what feed status --json prints: the feed as status
// --json lists it, and the server's clock its ages are from.
type feedStatusReport struct {
	ServerTime time.Time `json:"serverTime"`
	feedStatusJSON
}

// feedStatus prints feed name's status, as status prints the feeds, and
// each of its subscriber groups: its position, how many published events
// it has not acknowledged and how long the oldest has waited.
func (cl *cli) feedStatus(ctx context.Context, g *globals, name string) error {
	cn, c, err := feedConnect(ctx, cl, g, name)
	if err != nil {
		return err
	}
	defer cn.close()
	defer func() { _ = closeCoordinator(c) }()
	now, err := cn.serverNow(ctx)
	if err != nil {
		return err
	}
	st, err := c.Feed(name).Status(ctx)
	if err != nil {
		return feedError(err)
	}
	rep := feedStatusReport{ServerTime: now, feedStatusJSON: feedStatusOf(st, now)}
	if g.json {
		return cl.printJSON(rep)
	}
	printFeeds(cl.stdout, []feedStatusJSON{rep.feedStatusJSON}, now)
	if len(rep.Groups) == 0 && !rep.Deleted {
		fmt.Fprintln(cl.stdout, "No subscriber groups (Feed.Subscribe makes one).")
	}
	return nil
}

// printGroups is status's section of the feeds' subscriber groups, if any:
// how far behind each handler is, by the server's clock now.
func printGroups(w io.Writer, feeds []feedStatusJSON, now time.Time) {
	some := false
	for _, f := range feeds {
		some = some || len(f.Groups) > 0
	}
	if !some {
		return
	}
	fmt.Fprintln(w, "Subscriber groups:")
	tw := table(w)
	fmt.Fprintln(tw, "  FEED\tGROUP\tPOSITION\tBEHIND\tOLDEST WAITING\tSUBSCRIBER")
	for _, f := range feeds {
		for _, g := range f.Groups {
			behind, oldest, holder := fmt.Sprint(g.Behind), "-", g.Holder
			if g.Truncated {
				behind = "truncated"
			}
			if g.Oldest != nil {
				oldest = fmt.Sprintf("%s (%v ago)", timestamp(*g.Oldest), age(now, *g.Oldest))
			}
			if holder == "" {
				holder = "none"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", f.Name, g.Name, g.Position, behind, oldest, holder)
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  (BEHIND: published events the group has not acknowledged; the count stops at 1000. truncated: history moved some.)")
}
