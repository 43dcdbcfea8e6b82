package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

// conn is a connection to the database the flags name.
type conn struct {
	g      *globals
	client *mongo.Client
	db     *mongo.Database
	txns   *mongo.Collection // the log, read at majority from the primary
	// archive is the archive --archive names, read likewise; nil if none.
	archive *mongo.Collection
	// others are the clients of the ledgers given in other deployments,
	// one per connection string; ledgers their accounts collections by
	// ledger name, read at majority from the primary.
	others  []*mongo.Client
	ledgers map[string]*mongo.Collection
	// commands counts the commands sent, for progress reports.
	commands atomic.Int64
}

// majority reads at majority read concern from the primary, as the
// library decides by.
var majority = options.Collection().SetReadConcern(readconcern.Majority()).SetReadPreference(readpref.Primary())

// target returns the connection string and the database the flags and the
// environment name.
func (g *globals) target(getenv func(string) string) (uri, db string, err error) {
	uri = g.uri
	if uri == "" {
		uri = getenv("MONGODB_URI")
	}
	if uri == "" {
		return "", "", usageErrorf("no server: pass --uri mongodb://HOST:PORT/DATABASE or set MONGODB_URI")
	}
	db = g.db
	if db == "" {
		if db, err = databaseOf(uri); err != nil {
			return "", "", usageErrorf("connection string %s: %v", redact(uri), err)
		}
	}
	if db == "" {
		return "", "", usageErrorf("no database: pass --db NAME, or name it in the connection string's path "+
			"(mongodb://HOST:PORT/NAME, as mongosh does); %s names none", redact(uri))
	}
	return uri, db, nil
}

// databaseOf returns the database a connection string's path names
// (mongodb://user:pass@host1,host2/NAME?options), "" if none. The user
// information ends at the last "@".
func databaseOf(uri string) (string, error) {
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return "", errors.New(`no "mongodb://" scheme`)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	_, path, ok := strings.Cut(rest, "/")
	if !ok {
		return "", nil
	}
	return url.PathUnescape(path)
}

// redact is a connection string fit to print: its password hidden, and
// its options too (they may carry secrets: tlsCertificateKeyFilePassword,
// authMechanismProperties), shown as "?…". The user information ends at
// the last "@" (an "@" in it must be escaped), so a password holding "/",
// "?" or "#" is hidden whole; a string too odd to read is hidden whole.
func redact(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return "(a connection string with no scheme)"
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, _, hasPassword := strings.Cut(rest[:at], ":")
		if strings.ContainsAny(user, "/?#") {
			user = "***" // the "@" was not where user information ends
		}
		if hasPassword {
			user += ":***"
		}
		rest = user + rest[at:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i] + "?…"
	}
	return scheme + "://" + rest
}

// connect connects to the server and checks that it answers.
func (g *globals) connect(ctx context.Context, cl *cli) (*conn, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	uri, name, err := g.target(cl.getenv)
	if err != nil {
		return nil, err
	}
	cn := &conn{g: g, ledgers: map[string]*mongo.Collection{}}
	client, err := cn.dial(ctx, uri)
	if err != nil {
		return nil, err
	}
	cn.client = client
	cn.db = client.Database(name)
	cn.txns = cn.db.Collection(g.transactions, majority)
	if g.archive != "" {
		cn.archive = cn.db.Collection(g.archive, majority)
	}
	cn.ledgers[""] = cn.db.Collection(g.accounts, majority)
	byURI := map[string]*mongo.Client{}
	for _, l := range g.ledgers {
		if l.uri == "" {
			cn.ledgers[l.name] = cn.db.Collection(l.collection, majority)
			continue
		}
		c := byURI[l.uri]
		if c == nil {
			if c, err = cn.dial(ctx, l.uri); err != nil {
				cn.close()
				return nil, fmt.Errorf("ledger %s: %w", l.name, err)
			}
			byURI[l.uri] = c
		}
		cn.ledgers[l.name] = c.Database(l.db).Collection(l.collection, majority)
	}
	return cn, nil
}

// connectExisting connects as connect does, and refuses (exit status 1)
// a database that holds none of the collections the flags name in it:
// the default ledger's accounts (--accounts), the log (--transactions),
// the archive (--archive) if given, and the accounts of each --ledger
// given there. What the read commands would find in it is nothing, which
// says "no transfer" and "no account" of a database that is the wrong
// one, or not twopc's.
func (g *globals) connectExisting(ctx context.Context, cl *cli) (*conn, error) {
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return nil, err
	}
	colls, flags := []string{g.accounts, g.transactions}, []string{"--db", "--accounts", "--transactions"}
	if g.archive != "" {
		colls, flags = append(colls, g.archive), append(flags, "--archive")
	}
	for _, l := range g.ledgers {
		if l.uri == "" && !contains(colls, l.collection) {
			colls = append(colls, l.collection)
			if !contains(flags, "--ledger") {
				flags = append(flags, "--ledger")
			}
		}
	}
	why := "so nothing to read: no account was opened and no transfer made in it, or " + series(flags, "or") + " names another"
	if err := cn.hasAny(ctx, why, colls...); err != nil {
		cn.close()
		return nil, err
	}
	return cn, nil
}

// hasLog refuses (exit status 1) a database with no transactions
// collection of the name the flags give: counting its transactions would
// say "none" of a log that is not there, when the database or collection
// named is the wrong one, or no transfer was ever made in it.
func (cn *conn) hasLog(ctx context.Context) error {
	return cn.hasAny(ctx, "so no transaction to count: no transfer was made in it, or --db or --transactions names another", cn.txns.Name())
}

// hasAny returns nil if the flags' database holds one of the collections
// colls, and otherwise refuses (exit status 1) with a message that names
// them, says why that matters, and names the collections the database
// holds (the first ten), for the one a mistyped flag missed.
func (cn *conn) hasAny(ctx context.Context, why string, colls ...string) error {
	names, err := cn.db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return fmt.Errorf("list the collections of database %s: %w", cn.db.Name(), err)
	}
	for _, c := range colls {
		if contains(names, c) {
			return nil
		}
	}
	quoted := make([]string, len(colls))
	for i, c := range colls {
		quoted[i] = strconv.Quote(c)
	}
	missing := "no collection " + quoted[0]
	switch n := len(quoted); {
	case n == 2:
		missing = "neither collection " + quoted[0] + " nor " + quoted[1]
	case n > 2:
		missing = "none of the collections " + series(quoted, "and")
	}
	sort.Strings(names)
	has := "it has no collection at all"
	switch {
	case len(names) > 10:
		has = "its collections: " + strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	case len(names) > 0:
		has = "its collections: " + strings.Join(names, ", ")
	}
	return refused(fmt.Errorf("database %s has %s, %s (%s)", cn.db.Name(), missing, why, has))
}

// dial connects to the deployment of connection string uri and checks
// that its primary answers. Every client counts its commands in cn.
func (cn *conn) dial(ctx context.Context, uri string) (*mongo.Client, error) {
	monitor := &event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) { cn.commands.Add(1) }}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName(cn.g.application).
		SetServerSelectionTimeout(cn.g.timeout).SetMonitor(monitor))
	if err != nil {
		return nil, usageErrorf("connection string %s: %v", redact(uri), err)
	}
	if cn.client != nil {
		cn.others = append(cn.others, client)
	}
	pctx, cancel := context.WithTimeout(ctx, cn.g.timeout)
	defer cancel()
	if err := client.Ping(pctx, readpref.Primary()); err != nil {
		disconnect(client)
		if cn.client != nil {
			cn.others = cn.others[:len(cn.others)-1]
		}
		return nil, fmt.Errorf("cannot connect to %s: %w", redact(uri), err)
	}
	return client, nil
}

// close disconnects every client, even after ctx ended.
func (cn *conn) close() {
	for _, c := range cn.others {
		disconnect(c)
	}
	disconnect(cn.client)
}

// disconnect disconnects c, waiting at most 10 seconds.
func disconnect(c *mongo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Disconnect(ctx)
}

// ledger returns the accounts collection of ledger name ("" is the
// default ledger), read as the library reads it, in whatever deployment
// the flags put it; false if the flags do not give that ledger.
func (cn *conn) ledger(name string) (*mongo.Collection, bool) {
	coll, ok := cn.ledgers[name]
	return coll, ok
}

// needLedgers refuses a transaction with a leg on a ledger the flags do not
// give: the tool could not read or write its accounts.
func (cn *conn) needLedgers(t *txnDoc) error {
	for _, l := range t.legs {
		if _, ok := cn.ledger(l.ledger); !ok {
			return usageErrorf("transaction %s has a leg on ledger %q: give its accounts with --ledger %s=COLLECTION "+
				"or --ledger %s=mongodb://HOST:PORT/DB.COLLECTION", t.idString(), l.ledger, l.ledger, l.ledger)
		}
	}
	return nil
}

// coordinator returns a coordinator on the connection's database, under
// the tool's application name, with every ledger the flags give, each in
// its own deployment.
func (cn *conn) coordinator(opts ...twopc.Option) (*twopc.Coordinator, error) {
	all := []twopc.Option{
		twopc.WithApplication(cn.g.application),
		twopc.WithCollections(cn.g.accounts, cn.g.transactions),
	}
	for _, l := range cn.g.ledgers {
		// The library sets its own read and write concerns on the collection.
		all = append(all, twopc.WithLedger(l.name, cn.ledgers[l.name]))
	}
	if cn.archive != nil {
		// The library's lookups (Cancel, Reverse, Capture, Void) then read
		// the archive as well as the log, and answer for an archived
		// transaction from its first record: Cancel writes no placeholder
		// for one. The time to keep is recorded only in what the tool
		// creates, reversals and placeholders, which are never removed.
		all = append(all, twopc.WithHistory(toolKeep, cn.archive))
	}
	c, err := twopc.NewCoordinator(cn.db, append(all, opts...)...)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return c, nil
}

// closeCoordinator closes c, waiting for its background settling, even
// after ctx ended.
func closeCoordinator(c *twopc.Coordinator) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Close(ctx)
}

// serverNow is the server's clock (hello's localTime), by which the library
// judges staleness.
func (cn *conn) serverNow(ctx context.Context) (time.Time, error) {
	now, err := schema.ServerNow(ctx, cn.db)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w (see twopc doctor)", err)
	}
	return now, nil
}

// findTxn reads transaction id as stored; nil if there is none.
// toolKeep is the time to keep (twopc.WithHistory) of the coordinator the
// tool builds when --archive is given; see conn.coordinator.
const toolKeep = 24 * time.Hour

// findAnywhere reads transaction id as findTxn does, or, when --archive
// names the archive, as show does (lookupTxn: the archive's first record
// if it holds the id); nil if none holds it.
func (cn *conn) findAnywhere(ctx context.Context, id bson.ObjectID) (*txnDoc, error) {
	if cn.archive == nil {
		return cn.findTxn(ctx, id)
	}
	f, err := cn.lookupTxn(ctx, id)
	if f == nil || err != nil {
		return nil, err
	}
	return &f.txnDoc, nil
}

func (cn *conn) findTxn(ctx context.Context, id bson.ObjectID) (*txnDoc, error) {
	raw, err := cn.txns.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read transaction %s: %w", id.Hex(), err)
	}
	t := parseTxn(raw)
	return &t, nil
}

// oneID parses the command line of a command that takes one transaction
// id, and connects: what show, cancel and reverse begin with.
func (cl *cli) oneID(ctx context.Context, cmd *command, fs *flag.FlagSet, g *globals, args []string) (bson.ObjectID, *conn, error) {
	pos, err := cl.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return bson.ObjectID{}, nil, err
	}
	id, err := cl.parseID(cmd, fs, pos[0])
	if err != nil {
		return id, nil, err
	}
	cn, err := g.connect(ctx, cl)
	return id, cn, err
}

// parseID reads a transaction id argument of cmd.
func (cl *cli) parseID(cmd *command, fs *flag.FlagSet, s string) (bson.ObjectID, error) {
	id, err := bson.ObjectIDFromHex(s)
	if err != nil {
		return id, cl.usage(cmd, fs, "%q is not a transaction id (24 hexadecimal digits)", s)
	}
	return id, nil
}
