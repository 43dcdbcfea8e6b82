package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// BenchmarkFrontHop measures what the front's hop to FerretDB costs: the
// same FerretDB (listening on TCP and serving in process at once) behind
// two fronts, one that forwards over a loopback TCP connection (NewFront,
// as a Server's did before issue 49's "one hop") and one that hands each
// request to FerretDB in process (a Server's). A raw wire client sends
// one request at a time: a ping, or the guarded update by _id of a
// transaction's state move (BenchmarkServerTransactionUpdate's) on a
// collection with no index but _id's (update) or with the library's three
// log indexes (update-indexed: {state, created}, {accounts, committedAt},
// {accounts, created, _id}). Besides ns/op it reports cpu-us/op,
// the whole process's CPU time (user and system: client, front and
// FerretDB) per request, and srv-us/op, the front's clock of the backend
// per request. Compare the two hops within one run.
func BenchmarkFrontHop(b *testing.B) {
	dir := b.TempDir()
	ferret, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0", InProcess: true},
		Logger:    slog.New(slog.DiscardHandler),
		Handler:   "sqlite",
		SQLiteURL: (&url.URL{Scheme: "file", Path: dir + "/", RawQuery: url.Values{"_pragma": {"synchronous(OFF)"}}.Encode()}).String(),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ferret.Run(ctx) }()
	defer func() { stop(); <-done }()
	backend, err := url.Parse(ferret.MongoDBURI())
	if err != nil {
		b.Fatal(err)
	}

	for _, hop := range []string{"tcp", "in-process"} {
		dial := dialInProcess(ferret)
		if hop == "tcp" {
			dial = dialTCP(backend.Host)
		}
		f, err := newFront("127.0.0.1:0", hop, dial, FrontOptions{})
		if err != nil {
			b.Fatal(err)
		}
		conn, err := net.Dial("tcp", f.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		const docs = 64
		ids := make([]bson.ObjectID, docs) // an ObjectID, as the library's: the dev server reads it by the _id index
		for i := range ids {
			ids[i] = bson.NewObjectID()
		}
		for _, coll := range []string{"hop_" + hop, "hop_indexed_" + hop} {
			if coll != "hop_"+hop {
				hopRoundTrip(b, conn, bson.D{{Key: "createIndexes", Value: coll}, {Key: "indexes", Value: bson.A{
					bson.D{{Key: "key", Value: bson.D{{Key: "state", Value: 1}, {Key: "created", Value: 1}}}, {Key: "name", Value: "s"}},
					bson.D{{Key: "key", Value: bson.D{{Key: "accounts", Value: 1}, {Key: "committedAt", Value: 1}}}, {Key: "name", Value: "a"}},
					bson.D{{Key: "key", Value: bson.D{{Key: "accounts", Value: 1}, {Key: "created", Value: 1}, {Key: "_id", Value: 1}}}, {Key: "name", Value: "t"}},
				}}, {Key: "$db", Value: "hop"}})
			}
			for i := range ids {
				hopRoundTrip(b, conn, bson.D{{Key: "insert", Value: coll}, {Key: "documents", Value: bson.A{
					bson.D{{Key: "_id", Value: ids[i]}, {Key: "source", Value: "a"}, {Key: "destination", Value: "b"}, {Key: "value", Value: int64(100)},
						{Key: "state", Value: "pending"}, {Key: "lastModified", Value: time.Now()},
						{Key: "created", Value: time.Now()}, {Key: "accounts", Value: bson.A{"0::sa", "0::sb"}}}}}, {Key: "$db", Value: "hop"}})
			}
		}
		// each document's state, by command, across the runs of b.N
		applied := map[string][]bool{"update": make([]bool, docs), "update-indexed": make([]bool, docs)}
		for _, cmd := range []string{"ping", "update", "update-indexed"} {
			b.Run(fmt.Sprintf("hop=%s/cmd=%s", hop, cmd), func(b *testing.B) {
				f.ResetWork()
				cpu := processCPU(b)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					c := bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}
					if cmd != "ping" {
						coll := "hop_" + hop
						if cmd == "update-indexed" {
							coll = "hop_indexed_" + hop
						}
						from, to := "pending", "applied"
						if applied[cmd][i%docs] {
							from, to = to, from
						}
						applied[cmd][i%docs] = !applied[cmd][i%docs]
						c = bson.D{{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{bson.D{
							{Key: "q", Value: bson.D{{Key: "_id", Value: ids[i%docs]}, {Key: "state", Value: from}}},
							{Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: to}}},
								{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}}}}}}}, {Key: "$db", Value: "hop"}}
					}
					reply := hopRoundTrip(b, conn, c)
					if n, _ := reply.Lookup("nModified").AsInt64OK(); cmd != "ping" && n != 1 {
						b.Fatalf("modified %d, want 1: %s", n, reply)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
				var busy time.Duration
				for _, w := range f.Work() {
					busy += w.Busy
				}
				if cmd != "ping" { // the front's clock counts no ping
					b.ReportMetric(float64(busy)/float64(time.Microsecond)/float64(b.N), "srv-us/op")
				}
			})
		}
		_ = conn.Close()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// hopRoundTrip sends cmd on conn as an OP_MSG and returns its reply's
// body, failing unless it is ok: 1.
func hopRoundTrip(b *testing.B, conn net.Conn, cmd bson.D) bson.Raw {
	body, err := bson.Marshal(cmd)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Write(opMsgMessage(1, 0, body)); err != nil {
		b.Fatal(err)
	}
	msg, err := readMessage(conn)
	if err != nil {
		b.Fatal(err)
	}
	reply, err := opMsgReply(msg)
	if err != nil {
		b.Fatal(err)
	}
	if ok, _ := reply.Lookup("ok").AsFloat64OK(); ok != 1 {
		b.Fatalf("%s: %s", cmd, reply)
	}
	return reply
}

// processCPU is the process's CPU time so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
