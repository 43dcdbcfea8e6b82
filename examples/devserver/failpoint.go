package devserver

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The front answers MongoDB's test command configureFailPoint for the fail
// point failCommand, as a mongod started with enableTestCommands does
// (https://github.com/mongodb/mongo/wiki/The-%22failCommand%22-fail-point;
// the drivers' specification tests use it), so that a test can make a
// command fail as a primary stepping down or a shard's failover does, and
// run unchanged against a real mongod:
//
//	{configureFailPoint: "failCommand",
//	 mode: "alwaysOn" | "off" | {times: n} | {skip: n},
//	 data: {failCommands: ["update", ...], errorCode: N, errorLabels: [...],
//	        writeConcernError: {code, errmsg, errorLabels?},
//	        closeConnection: bool, namespace: "db.coll"}}
//
// The reply is {count: <times the fail point was entered so far>, ok: 1}.
// A command it applies to is answered {ok: 0, code: errorCode, errmsg,
// errorLabels} without running (errorCode); or runs and gets the
// writeConcernError (and errorLabels) added to its reply
// (writeConcernError); or has its connection closed without running
// (closeConnection). A command applies when its name is in failCommands
// and, with namespace set, it names that database and collection.
// Handshake and monitoring commands are never failed.
//
// One extension, which MongoDB's fail point cannot express: with
// data.writeErrorIndexes: [i, ...] on an update, delete or insert, the
// command runs but the statements at those indexes do not: each is
// answered with a write error {index: i, code: errorCode, errmsg} in the
// command's reply, which carries errorLabels, as a mongos reports a shard's
// failover for some statements of a command. See DIFFERENCES.md.

// failPointName is the one fail point the front knows.
const failPointName = "failCommand"

// failPoint is the state of failCommand. Safe for concurrent use.
type failPoint struct {
	mu      sync.Mutex
	on      bool
	times   int // applications left; 0 with on: always
	skip    int // matching commands to let through first
	entered int64
	cfg     failCommand
}

// failCommand is failCommand's data.
type failCommand struct {
	FailCommands      []string `bson:"failCommands"`
	ErrorCode         *int32   `bson:"errorCode"`
	ErrorLabels       []string `bson:"errorLabels"`
	WriteConcernError bson.Raw `bson:"writeConcernError"`
	CloseConnection   bool     `bson:"closeConnection"`
	Namespace         string   `bson:"namespace"`
	WriteErrorIndexes []int    `bson:"writeErrorIndexes"`
}

// configure runs the configureFailPoint command cmd and returns its reply.
func (p *failPoint) configure(cmd bson.Raw) bson.D {
	name, _ := cmd.Lookup("configureFailPoint").StringValueOK()
	if name != failPointName {
		return commandError(2, fmt.Sprintf("devserver: unknown fail point %q (the front knows only %s)", name, failPointName))
	}
	on, times, skip := false, 0, 0
	mode := cmd.Lookup("mode")
	if s, ok := mode.StringValueOK(); ok {
		switch s {
		case "alwaysOn":
			on = true
		case "off":
		default:
			return commandError(2, fmt.Sprintf("devserver: unknown fail point mode %q", s))
		}
	} else if doc, ok := mode.DocumentOK(); ok {
		if v, err := doc.LookupErr("times"); err == nil {
			n, _ := v.AsInt64OK()
			times, on = int(n), n > 0
		} else if v, err := doc.LookupErr("skip"); err == nil {
			n, _ := v.AsInt64OK()
			skip, on = int(n), true
		} else {
			return commandError(2, fmt.Sprintf("devserver: fail point mode %s: want times or skip", doc))
		}
	} else {
		return commandError(2, "devserver: fail point mode must be a string or a document")
	}
	var cfg failCommand
	if data, ok := cmd.Lookup("data").DocumentOK(); ok {
		if err := bson.Unmarshal(data, &cfg); err != nil {
			return commandError(2, fmt.Sprintf("devserver: fail point data: %v", err))
		}
	}
	if on && cfg.ErrorCode == nil && cfg.WriteConcernError == nil && !cfg.CloseConnection {
		return commandError(2, "devserver: failCommand needs errorCode, writeConcernError or closeConnection")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	count := p.entered
	p.on, p.times, p.skip, p.cfg = on, times, skip, cfg
	return bson.D{{Key: "count", Value: count}, {Key: "ok", Value: 1.0}}
}

// take returns what the fail point does to a command named command on
// namespace db.coll, and whether it applies, counting it.
func (p *failPoint) take(command, db, coll string) (failCommand, bool) {
	if _, protected := protectedCommands[strings.ToLower(command)]; protected || command == "configureFailPoint" {
		return failCommand{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || !slices.Contains(p.cfg.FailCommands, command) {
		return failCommand{}, false
	}
	if p.cfg.Namespace != "" && p.cfg.Namespace != db+"."+coll {
		return failCommand{}, false
	}
	if p.skip > 0 {
		p.skip--
		return failCommand{}, false
	}
	p.entered++
	if p.times > 0 {
		p.times--
		if p.times == 0 {
			p.on = false
		}
	}
	return p.cfg, true
}

// errorReply is the reply to a command failed with errorCode.
func (c failCommand) errorReply() bson.D {
	d := commandError(*c.ErrorCode, fmt.Sprintf("Failing command via '%s' failpoint", failPointName))
	if len(c.ErrorLabels) > 0 {
		d = append(d, bson.E{Key: "errorLabels", Value: c.ErrorLabels})
	}
	return d
}

// statementErrors returns the write errors the fail point gives the
// statements at writeErrorIndexes, by index, as the ok: 0 replies
// writeResult.failed takes in; nil if it gives none.
func (c failCommand) statementErrors() map[int]bson.Raw {
	if len(c.WriteErrorIndexes) == 0 || c.ErrorCode == nil {
		return nil
	}
	out := map[int]bson.Raw{}
	for _, i := range c.WriteErrorIndexes {
		b, err := bson.Marshal(commandError(*c.ErrorCode, fmt.Sprintf("Failing statement %d via '%s' failpoint", i, failPointName)))
		if err == nil {
			out[i] = b
		}
	}
	return out
}

// amend adds to reply, the command's reply, the fail point's
// writeConcernError and errorLabels, when it ran the command.
func (c failCommand) amend(reply bson.Raw) ([]byte, error) {
	elems, err := reply.Elements()
	if err != nil {
		return nil, err
	}
	var d bson.D
	for _, e := range elems {
		if e.Key() == "writeConcernError" && c.WriteConcernError != nil {
			continue
		}
		if e.Key() == "errorLabels" && len(c.ErrorLabels) > 0 {
			continue
		}
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	if c.WriteConcernError != nil {
		d = append(d, bson.E{Key: "writeConcernError", Value: c.WriteConcernError})
	}
	if len(c.ErrorLabels) > 0 {
		d = append(d, bson.E{Key: "errorLabels", Value: c.ErrorLabels})
	}
	return bson.Marshal(d)
}

// commandError is MongoDB's reply to a command that failed.
func commandError(code int32, msg string) bson.D {
	return bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: msg}, {Key: "code", Value: code}}
}

// failPointRequest handles the fail point for one request: it answers
// configureFailPoint, and fails a command the fail point applies to. It
// returns the replies to send in place of running the command (done),
// whether to close the connection instead, and otherwise what to do to
// the command's reply once run (nil: nothing).
func (f *Front) failPointRequest(msg []byte, req *request) (replies [][]byte, done, closeConn bool, after *failCommand, err error) {
	if req.command != "configureFailPoint" && !f.failPoint.mayApply() {
		return nil, false, false, nil, nil
	}
	_, sections, err := opMsgBody(msg)
	if err != nil {
		return nil, false, false, nil, nil // not an OP_MSG: not ours
	}
	body, _, ok := opMsgSections(sections)
	if !ok {
		return nil, false, false, nil, nil
	}
	if req.command == "configureFailPoint" {
		b, err := bson.Marshal(f.failPoint.configure(body))
		if err != nil {
			return nil, false, false, nil, err
		}
		return f.replyTo(*req, b), true, false, nil, nil
	}
	db, _ := body.Lookup("$db").StringValueOK()
	c, ok := f.failPoint.take(req.command, db, req.collection)
	switch {
	case !ok:
		return nil, false, false, nil, nil
	case c.CloseConnection:
		return nil, false, true, nil, nil
	case c.ErrorCode != nil && (req.write == nil || len(c.WriteErrorIndexes) == 0) && c.WriteConcernError == nil:
		b, err := bson.Marshal(c.errorReply())
		if err != nil {
			return nil, false, false, nil, err
		}
		return f.replyTo(*req, b), true, false, nil, nil
	}
	if req.write != nil {
		req.write.failAt = c.statementErrors()
	}
	return nil, false, false, &c, nil
}

// mayApply reports whether the fail point is on.
func (p *failPoint) mayApply() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.on
}

// amendReplies applies after to replies, the command's replies (one
// OP_MSG; others are left as they are).
func (f *Front) amendReplies(req request, replies [][]byte, after *failCommand) ([][]byte, error) {
	if after == nil || len(replies) != 1 {
		return replies, nil
	}
	reply, err := opMsgReply(replies[0])
	if err != nil {
		return replies, nil // not one the front can take apart: as it is
	}
	b, err := after.amend(reply)
	if err != nil {
		return nil, err
	}
	return f.replyTo(req, b), nil
}
