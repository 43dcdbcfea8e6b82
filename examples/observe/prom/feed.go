package prom

// The change feeds' lag as metrics: read at each scrape from Feed.Status.

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twopc/twopc"
)

// FeedCollector exports the lag of a Coordinator's change feeds, read at
// each scrape (Feed.Status, one read a feed, bounded by its timeout):
//
//	metric                           type     labels
//	twopc_feed_published_batch       gauge    feed         the last batch readers may read
//	twopc_feed_waiting               gauge    feed         transactions whose events wait to be numbered (the sequencer's lag)
//	twopc_feed_group_behind          gauge    feed, group  published events the group has not acknowledged (up to twopc.MaxFeedBehind)
//	twopc_feed_group_oldest_seconds  gauge    feed, group  how long the oldest of those has waited, by this host's clock; 0 if none
//	twopc_feed_group_truncated       gauge    feed, group  1 if history moved events the group had not acknowledged
//	twopc_feed_scrape_errors_total   counter  feed         scrapes whose read of the feed failed
//
// Worth an alert: twopc_feed_group_oldest_seconds above what a consumer
// may lag (its handler is failing or gone), twopc_feed_waiting high for
// long (no sequencer runs), twopc_feed_group_truncated at 1.
type FeedCollector struct {
	c       *twopc.Coordinator
	feeds   []string
	timeout time.Duration
	errs    *prometheus.CounterVec

	published, waiting, behind, oldest, truncated *prometheus.Desc
}

// NewFeedCollector returns the collector of the feeds named (each scrape
// reads each one's status within timeout); register it with a registry.
func NewFeedCollector(c *twopc.Coordinator, timeout time.Duration, feeds ...string) *FeedCollector {
	return &FeedCollector{
		c: c, feeds: feeds, timeout: timeout,
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "twopc_feed_scrape_errors_total",
			Help: "Scrapes whose read of the feed's status failed.",
		}, []string{"feed"}),
		published: prometheus.NewDesc("twopc_feed_published_batch", "The last batch of the feed readers may read.", []string{"feed"}, nil),
		waiting: prometheus.NewDesc("twopc_feed_waiting",
			"Transactions whose events wait to be numbered: how far the sequencer is behind (counted up to what one round takes).", []string{"feed"}, nil),
		behind: prometheus.NewDesc("twopc_feed_group_behind",
			"Published events the subscriber group has not acknowledged (counted up to twopc.MaxFeedBehind).", []string{"feed", "group"}, nil),
		oldest: prometheus.NewDesc("twopc_feed_group_oldest_seconds",
			"How long the oldest published event the group has not acknowledged has waited, by the scraping host's clock; 0 if none.", []string{"feed", "group"}, nil),
		truncated: prometheus.NewDesc("twopc_feed_group_truncated",
			"1 if history moved events the group had not acknowledged (its next read fails with ErrFeedTruncated).", []string{"feed", "group"}, nil),
	}
}

// Describe sends the collector's descriptions.
func (f *FeedCollector) Describe(ch chan<- *prometheus.Desc) {
	f.errs.Describe(ch)
	for _, d := range []*prometheus.Desc{f.published, f.waiting, f.behind, f.oldest, f.truncated} {
		ch <- d
	}
}

// Collect reads each feed's status and sends its metrics; a feed whose
// read fails counts a scrape error and sends none.
func (f *FeedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, name := range f.feeds {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		st, err := f.c.Feed(name).Status(ctx)
		cancel()
		if err != nil {
			f.errs.WithLabelValues(name).Inc()
			continue
		}
		ch <- prometheus.MustNewConstMetric(f.published, prometheus.GaugeValue, float64(st.Published), name)
		ch <- prometheus.MustNewConstMetric(f.waiting, prometheus.GaugeValue, float64(st.Waiting), name)
		for _, g := range st.Groups {
			age := 0.0
			if !g.Oldest.IsZero() {
				age = max(0, time.Since(g.Oldest).Seconds())
			}
			trunc := 0.0
			if g.Truncated {
				trunc = 1
			}
			ch <- prometheus.MustNewConstMetric(f.behind, prometheus.GaugeValue, float64(g.Behind), name, g.Name)
			ch <- prometheus.MustNewConstMetric(f.oldest, prometheus.GaugeValue, age, name, g.Name)
			ch <- prometheus.MustNewConstMetric(f.truncated, prometheus.GaugeValue, trunc, name, g.Name)
		}
	}
	f.errs.Collect(ch)
}
