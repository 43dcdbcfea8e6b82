package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/twopc/twopc/internal/native"
	"github.com/twopc/twopc/internal/schema"
)

var doctorCommand = &command{
	name:    "doctor",
	summary: "check that the server gives the single-document atomicity twopc needs, and what it has",
	help: `Doctor checks, before you trust a server with money, that it gives what
the protocol rests on, in a scratch collection of the database that it
drops afterwards:

  single-document atomicity: 20 goroutines × 50 concurrent $inc of one
    document must end at 1000 (none lost), and of 20 concurrent
    conditional claims ({_id, state: "initial"} → "claimed") exactly one
    must win. FerretDB v1 alone fails both; MongoDB passes.
  the server's clock: hello's localTime, by which staleness is judged.
  majority read concern and majority write concern, which every read
    the library decides by and every write it makes use.
  shard keys, on a sharded cluster (read through the router from
    config.collections): the log (--transactions), its checkpoints,
    refund books and feeds, the archive (--archive) must be unsharded or sharded on
    {_id: "hashed"}; each ledger's accounts unsharded or sharded on
    {_id: "hashed"} or {_id: 1}. The library refuses any other key
    (ErrShardKey).
  the shards' clocks, on a sharded cluster: each shard that holds the
    log, against the router's clock, through the router alone: a
    document a shard in <transactions>_clockprobe (which doctor shards
    on {_id: "hashed"} the first time, and keeps), stamped with
    $currentDate, against hello's localTime, round trips accounted for.
    The largest skew must be within a quarter of the page tokens'
    horizon (250 ms of 1 s; the checkpoints' is 1 min): statements'
    pages and checkpoints rely on it (PROTOCOL.md, Clocks).

It reports, without requiring them, multi-document transactions (what
twopc's internal/native comparison needs; twopc does not), partial
indexes, and
the server's name and version (buildInfo; FerretDB adds
ferretdbVersion). Exit status 1 if anything needed is missing.

Examples:
  twopc doctor --uri mongodb://127.0.0.1:27017 --db bank
  twopc doctor --json | jq -c '.checks[] | {name, ok, detail}'`,
	run: runDoctor,
}

// The atomicity checks' sizes.
const (
	incWorkers   = 20
	incEach      = 50
	claimWorkers = 20
)

type doctorReport struct {
	OK       bool         `json:"ok"` // every needed check passed
	Database string       `json:"database"`
	Scratch  string       `json:"scratchCollection"`
	Server   serverInfo   `json:"server"`
	Checks   []checkEntry `json:"checks"`
	// ClockSkew is the clock-skew check's figures, on a sharded cluster.
	ClockSkew *clockSkewReport `json:"clockSkew,omitempty"`
}

type serverInfo struct {
	Name            string    `json:"name"` // FerretDB if buildInfo has ferretdbVersion, else MongoDB or compatible
	Version         string    `json:"version"`
	FerretDBVersion string    `json:"ferretdbVersion,omitempty"`
	GitVersion      string    `json:"gitVersion,omitempty"`
	Topology        string    `json:"topology"` // standalone, replica set NAME, sharded (mongos)
	MaxWireVersion  int32     `json:"maxWireVersion"`
	LocalTime       time.Time `json:"localTime,omitzero"`
	ClockOffset     float64   `json:"clockOffsetSeconds"` // server minus this host, about
}

// checkEntry is one check: needed ones decide the exit status.
type checkEntry struct {
	Name   string `json:"name"`
	Needed bool   `json:"needed"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Check names, as the JSON output gives them.
const (
	checkInc           = "atomic-inc"
	checkClaim         = "atomic-claim"
	checkLocalTime     = "hello-localtime"
	checkReadMajority  = "majority-read-concern"
	checkWriteMajority = "majority-write-concern"
	checkTransactions  = "multi-document-transactions"
	checkPartialIndex  = "partial-indexes"
	checkBuildInfo     = "buildinfo"
	checkScratchDrop   = "scratch-dropped"
	checkShardKeys     = "shard-keys"
)

func runDoctor(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication)
	if _, err := cl.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	rep, err := doctor(ctx, cn)
	if err != nil {
		return err
	}
	if g.json {
		if err := cl.printJSON(rep); err != nil {
			return err
		}
	} else {
		rep.print(cl.stdout)
	}
	if !rep.OK {
		return errCheckFailed
	}
	return nil
}

func doctor(ctx context.Context, cn *conn) (*doctorReport, error) {
	rep := &doctorReport{OK: true, Database: cn.db.Name(), Checks: []checkEntry{}}
	add := func(name string, needed, ok bool, format string, a ...any) {
		rep.Checks = append(rep.Checks, checkEntry{Name: name, Needed: needed, OK: ok, Detail: fmt.Sprintf(format, a...)})
		if needed && !ok {
			rep.OK = false
		}
	}

	var bi struct {
		Version    string        `bson:"version"`
		GitVersion string        `bson:"gitVersion"`
		FerretDB   bson.RawValue `bson:"ferretdbVersion"`
	}
	if err := cn.db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil {
		add(checkBuildInfo, false, false, "buildInfo failed: %v", err)
	}
	rep.Server.Version, rep.Server.GitVersion = bi.Version, bi.GitVersion
	rep.Server.Name = "MongoDB, or a server that reports as MongoDB"
	if bi.FerretDB.Type != 0 {
		rep.Server.Name, rep.Server.FerretDBVersion = "FerretDB", human(bi.FerretDB)
	}

	var hello struct {
		LocalTime      time.Time `bson:"localTime"`
		SetName        string    `bson:"setName"`
		Msg            string    `bson:"msg"`
		MaxWireVersion int32     `bson:"maxWireVersion"`
	}
	sent := time.Now()
	if err := cn.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	rtt := time.Since(sent)
	rep.Server.MaxWireVersion, rep.Server.LocalTime = hello.MaxWireVersion, hello.LocalTime
	switch {
	case hello.SetName != "":
		rep.Server.Topology = "replica set " + hello.SetName
	case hello.Msg == "isdbgrid":
		rep.Server.Topology = "sharded cluster (mongos)"
	default:
		rep.Server.Topology = "standalone"
	}

	var b [4]byte
	_, _ = rand.Read(b[:])
	rep.Scratch = "twopc_doctor_" + hex.EncodeToString(b[:])
	coll := cn.db.Collection(rep.Scratch)
	dropped := false
	defer func() {
		if !dropped {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = coll.Drop(dctx)
		}
	}()

	n, errs := atomicInc(ctx, coll)
	add(checkInc, true, n == incWorkers*incEach && errs == nil,
		"%d goroutines × %d concurrent $inc of one document ended at %d, want %d%s",
		incWorkers, incEach, n, incWorkers*incEach, errorsSaid(errs))
	wins, errs := atomicClaim(ctx, coll)
	add(checkClaim, true, wins == 1 && errs == nil,
		"%d of %d concurrent conditional claims {_id, state: \"initial\"} → \"claimed\" won, want exactly 1%s",
		wins, claimWorkers, errorsSaid(errs))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	if hello.LocalTime.IsZero() {
		add(checkLocalTime, true, false, "hello has no localTime: the library judges staleness by it (MongoDB 4.4.2 and later have it)")
	} else {
		offset := hello.LocalTime.Sub(sent.Add(rtt / 2))
		rep.Server.ClockOffset = seconds(offset)
		rel := "ahead of"
		if offset < 0 {
			rel, offset = "behind", -offset
		}
		add(checkLocalTime, true, true, "the server's clock reads %s, about %v %s this host's (±%v); staleness is judged by it",
			timestamp(hello.LocalTime), offset.Round(time.Millisecond), rel, (rtt/2 + time.Millisecond).Round(time.Millisecond))
	}
	err := coll.Clone(options.Collection().SetReadConcern(readconcern.Majority())).FindOne(ctx, bson.D{{Key: "_id", Value: "inc"}}).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = nil
	}
	add(checkReadMajority, true, err == nil, "%s", okOr(err, "a find at majority read concern"))
	_, err = coll.Clone(options.Collection().SetWriteConcern(writeconcern.Majority())).InsertOne(ctx, bson.D{{Key: "_id", Value: "majority"}})
	add(checkWriteMajority, true, err == nil, "%s", okOr(err, "an insert at majority write concern"))

	ok, err := native.Supported(ctx, cn.db)
	switch {
	case err != nil:
		add(checkTransactions, false, false, "could not tell: %v", err)
	case ok:
		add(checkTransactions, false, true, "yes (a replica set or sharded cluster); twopc does not need them, its internal/native comparison does")
	default:
		add(checkTransactions, false, false, "no (not a replica set or sharded cluster, or a server without them); twopc does not need them")
	}
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "x", Value: 1}},
		Options: options.Index().SetName("doctor_partial").SetPartialFilterExpression(bson.D{{Key: "x", Value: true}})})
	if err == nil {
		add(checkPartialIndex, false, true, "yes; the library makes none")
	} else {
		add(checkPartialIndex, false, false, "no (%v); the library makes none", err)
	}

	ok, detail := shardKeys(ctx, cn)
	add(checkShardKeys, true, ok, "%s", detail)
	rep.ClockSkew, ok, detail = clockSkew(ctx, cn)
	add(checkClockSkew, true, ok, "%s", detail)

	err = coll.Drop(ctx)
	dropped = err == nil
	add(checkScratchDrop, false, err == nil, "%s", okOr(err, "dropped scratch collection "+rep.Scratch))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return rep, nil
}

// atomicInc makes incWorkers goroutines each $inc one document incEach
// times, and returns where the count ended and the errors met.
func atomicInc(ctx context.Context, coll *mongo.Collection) (int64, error) {
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "inc"}, {Key: "n", Value: int64(0)}}); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, incWorkers*incEach)
	for range incWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range incEach {
				_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "inc"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int64(1)}}}})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	var doc struct {
		N int64 `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "inc"}}).Decode(&doc); err != nil {
		all = append(all, err)
	}
	return doc.N, errors.Join(all...)
}

// atomicClaim makes claimWorkers goroutines, released together, each try
// to claim one document with a conditional update, and returns how many
// won and the errors met. A win the document does not show is an error.
func atomicClaim(ctx context.Context, coll *mongo.Collection) (int, error) {
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "claim"}, {Key: schema.State, Value: "initial"}}); err != nil {
		return 0, err
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		wins   []int
		all    []error
		starts = make(chan struct{})
	)
	for g := range claimWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-starts
			err := coll.FindOneAndUpdate(ctx,
				bson.D{{Key: "_id", Value: "claim"}, {Key: schema.State, Value: "initial"}},
				bson.D{{Key: "$set", Value: bson.D{{Key: schema.State, Value: "claimed"}, {Key: "by", Value: g}}}}).Err()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins = append(wins, g)
			case !errors.Is(err, mongo.ErrNoDocuments):
				all = append(all, err)
			}
		}()
	}
	close(starts)
	wg.Wait()
	var doc struct {
		State string `bson:"state"`
		By    int    `bson:"by"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "claim"}}).Decode(&doc); err != nil {
		all = append(all, err)
	} else if len(wins) == 1 && (doc.State != "claimed" || doc.By != wins[0]) {
		all = append(all, fmt.Errorf("claimant %d won, but the document says %s by %d", wins[0], doc.State, doc.By))
	}
	return len(wins), errors.Join(all...)
}

// errorsSaid is err for a check's detail.
func errorsSaid(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("; errors: %v", err)
}

// okOr is what a check did, or its error.
func okOr(err error, did string) string {
	if err != nil {
		return fmt.Sprintf("%s failed: %v", did, err)
	}
	return did + ": ok"
}

func (r *doctorReport) print(w io.Writer) {
	s := r.Server
	name := s.Name
	if s.FerretDBVersion != "" {
		name += " " + s.FerretDBVersion + " (reporting MongoDB " + s.Version + ")"
	} else if s.Version != "" {
		name += ", version " + s.Version
	}
	fmt.Fprintf(w, "Server: %s; %s; wire version %d\n\n", name, s.Topology, s.MaxWireVersion)
	fmt.Fprintf(w, "Checks (scratch collection %s.%s):\n", r.Database, r.Scratch)
	tw := table(w)
	for _, c := range r.Checks {
		verdict, kind := "ok", "optional"
		if !c.OK {
			verdict = "no"
		}
		if c.Needed {
			kind = "needed"
			if !c.OK {
				verdict = "FAIL"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", verdict, kind, c.Name, c.Detail)
	}
	_ = tw.Flush()
	if r.OK {
		fmt.Fprintln(w, "\nThe server gives what twopc needs.")
		return
	}
	fmt.Fprintln(w, "\nThe server does NOT give what twopc needs: do not trust it with transfers.")
}

// shardKeys checks the shard keys of the collections the library writes,
// each through its own deployment's router (a ledger may be in another
// deployment), as the library does (ErrShardKey): it reports whether all
// are allowed and could be read, and what it found for each.
func shardKeys(ctx context.Context, cn *conn) (bool, string) {
	type target struct {
		coll *mongo.Collection
		rule schema.ShardRule
	}
	targets := []target{
		{cn.txns, schema.ShardedByHashedID},
		{cn.db.Collection(cn.txns.Name() + schema.CheckpointsSuffix), schema.ShardedByHashedID},
		{cn.db.Collection(cn.txns.Name() + schema.RefundsSuffix), schema.ShardedByHashedID},
		{cn.db.Collection(cn.txns.Name() + schema.FeedsSuffix), schema.ShardedByHashedID},
	}
	if cn.archive != nil {
		targets = append(targets, target{cn.archive, schema.ShardedByHashedID})
	}
	for _, name := range slices.Sorted(maps.Keys(cn.ledgers)) {
		targets = append(targets, target{cn.ledgers[name], schema.ShardedByID})
	}
	ok, routers := true, 0
	said := make([]string, 0, len(targets))
	for _, tg := range targets {
		ns := schema.Namespace(tg.coll)
		isRouter, err := schema.Router(ctx, tg.coll.Database())
		if err != nil {
			ok = false
			said = append(said, fmt.Sprintf("%s: %v", ns, err))
			continue
		}
		if !isRouter {
			continue
		}
		routers++
		key, err := schema.ShardKey(ctx, tg.coll)
		switch {
		case err != nil:
			ok = false
			said = append(said, err.Error())
		case key == nil:
			said = append(said, ns+": unsharded")
		default:
			if why := tg.rule.Problem(ns, key); why != "" {
				ok = false
				said = append(said, why)
			} else {
				said = append(said, ns+": sharded on "+schema.KeyLabel(key))
			}
		}
	}
	if routers == 0 && ok {
		return true, "not a sharded cluster: no shard keys"
	}
	return ok, strings.Join(said, "; ")
}
