package twopc

// When a feed published its batches: history keeps a transaction for its
// time to keep from the publication of its events, not from its end, so
// that events numbered after an outage of the sequencer longer than that
// time stay readable for it once published.

import (
	"time"
)

// feedMark says that batch B was published at At, by the log server's
// clock (the publication's own stamp, publishedAt).
type feedMark struct {
	B  int64     `bson:"b"`
	At time.Time `bson:"at"`
}

// markSpacing is how long after the last mark a publication records the
// one before it: at most one mark a second.
const markSpacing = time.Second

// maxMarks bounds a feed's marks (about 30 bytes each): past it, the mark
// whose neighbours are closest for its age goes (see thinMarks), so the
// marks span the feed's whole life, dense where recent.
const maxMarks = 512

// marksAfter returns d's marks with the publication d last recorded
// (batch d.Published at d.PublishedAt) added, if it is a markSpacing past
// the last mark, thinned to maxMarks; nil if nothing is to be added.
func (d *feedDoc) marksAfter() []feedMark {
	if d.Published < 1 || d.PublishedAt.IsZero() {
		return nil
	}
	if n := len(d.Marks); n > 0 && (d.Marks[n-1].B >= d.Published || d.PublishedAt.Sub(d.Marks[n-1].At) < markSpacing) {
		return nil
	}
	return thinMarks(append(append([]feedMark(nil), d.Marks...), feedMark{B: d.Published, At: d.PublishedAt}), maxMarks)
}

// thinMarks returns marks (in batch order) cut to at most n, the first and
// the last kept: each time, the mark whose removal leaves the smallest gap
// for its age (the gap between its neighbours over the time from the
// first's neighbour to the last mark) goes. What a removal costs is a
// later bound for the batches it covered (see publishedBy): it delays
// history, never lets it move an event sooner.
func thinMarks(marks []feedMark, n int) []feedMark {
	for len(marks) > n && len(marks) > 2 {
		last := marks[len(marks)-1].At
		best, bestRatio := -1, 0.0
		for i := 1; i < len(marks)-1; i++ {
			gap := marks[i+1].At.Sub(marks[i-1].At)
			age := last.Sub(marks[i-1].At)
			ratio := 1.0
			if age > 0 {
				ratio = float64(gap) / float64(age)
			}
			if best < 0 || ratio < bestRatio {
				best, bestRatio = i, ratio
			}
		}
		marks = append(marks[:best], marks[best+1:]...)
	}
	return marks
}

// publishedBy returns a time at or after the publication of batch b (one
// d published): the first mark at or past b, else the last publication
// (publishedAt), which came at or after every batch's. Zero if b is not
// published.
func (d *feedDoc) publishedBy(b int64) time.Time {
	if b < 1 || b > d.Published {
		return time.Time{}
	}
	for _, m := range d.Marks {
		if m.B >= b {
			return m.At
		}
	}
	return d.PublishedAt
}
