package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/twopc/twopc"
)

// globals are the flags every command takes: where the data is, and how
// to print.
type globals struct {
	uri          string
	db           string
	accounts     string
	transactions string
	application  string
	archive      string // --archive, for show, list, cancel, reverse, capture and void; "" if not given
	ledgers      ledgerList
	ledgerErr    error // the first --ledger value that could not be read
	json         bool
	timeout      time.Duration
}

// defaultApplication is the application name the tool claims transactions
// under unless --application says otherwise.
const defaultApplication = "twopc-cli"

// Which of the global flags that some commands use differently a command
// takes (see register).
const (
	// withLedgers: --ledger NAME=COLLECTION or NAME=URI, for the commands
	// that read or write accounts of other ledgers.
	withLedgers = 1 << iota
	// withApplication: --application, the tool's own application name.
	// list has a filter of that name instead.
	withApplication
	// withArchive: --archive, the archive show, list, cancel, reverse, capture and void read besides the
	// log. recover has its own, the archive it moves transactions to.
	withArchive
)

// register adds the global flags to fs, and those of with.
func (g *globals) register(fs *flag.FlagSet, with int) {
	g.application = defaultApplication
	fs.StringVar(&g.uri, "uri", "", "the server's connection `string` (default $MONGODB_URI)")
	fs.StringVar(&g.db, "db", "", "the `database` (default: the connection string's path, as mongosh reads it)")
	fs.StringVar(&g.accounts, "accounts", twopc.DefaultAccounts, "the default ledger's accounts `collection`")
	fs.StringVar(&g.transactions, "transactions", twopc.DefaultTransactions, "the transactions `collection` (the log)")
	fs.BoolVar(&g.json, "json", false, "print one JSON document on stdout, for scripts")
	fs.DurationVar(&g.timeout, "connect-timeout", 10*time.Second, "how long to wait for the server")
	if with&withApplication != 0 {
		fs.StringVar(&g.application, "application", defaultApplication, "the application `name` the tool claims transactions under")
	}
	if with&withArchive != 0 {
		fs.StringVar(&g.archive, "archive", "", "the archive `collection` of the log's database that transactions are moved to (twopc.WithHistory), read as well as the log")
	}
	if with&withLedgers != 0 {
		fs.Var(ledgerFlags{g}, "ledger", "a ledger `NAME=COLLECTION` of the same database, or NAME=mongodb://HOST:PORT/DB.COLLECTION anywhere, "+
			"DB also the database its credentials are checked against unless ?authSource= says otherwise (repeatable)")
	}
}

// check refuses global flags that cannot work together.
func (g *globals) check() error {
	switch {
	case g.ledgerErr != nil:
		return usageErrorf("%v", g.ledgerErr)
	case g.accounts == "" || g.transactions == "":
		return usageErrorf("--accounts and --transactions may not be empty")
	case g.accounts == g.transactions:
		return usageErrorf("--accounts and --transactions are both %q", g.accounts)
	case g.archive == g.transactions:
		return usageErrorf("--archive and --transactions are both %q: the archive is another collection", g.archive)
	case g.application == "":
		return usageErrorf("--application may not be empty")
	case g.timeout <= 0:
		return usageErrorf("--connect-timeout must be positive")
	}
	return nil
}

// ledgerFlag is one --ledger: NAME=COLLECTION, a collection of the
// database the other flags name, or NAME=URI, a connection string whose
// path is the namespace DB.COLLECTION (mongodb://HOST:PORT/bank.accounts),
// a collection of any database of any deployment.
type ledgerFlag struct {
	name string
	// uri is the connection string of the ledger's deployment with the
	// namespace taken out of its path (its path names db, as a connection
	// string's path names the database to authenticate against); "" for
	// the deployment and database of the other flags.
	uri, db    string
	collection string
}

// String is how the flag was given, with any password hidden.
func (f ledgerFlag) String() string {
	if f.uri == "" {
		return f.name + "=" + f.collection
	}
	return f.name + "=" + redact(hostsOf(f.uri)) + "/" + f.db + "." + f.collection
}

// ledgerList is the repeatable --ledger flag.
type ledgerList []ledgerFlag

func (l *ledgerList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, f := range *l {
		parts[i] = f.String()
	}
	return strings.Join(parts, ",")
}

// ledgerFlags is the --ledger flag as the flag package sees it. Its Set
// never fails: the flag package would print the value as given, password
// and all; the first bad value is kept, redacted, for globals.check.
type ledgerFlags struct{ g *globals }

func (f ledgerFlags) String() string {
	if f.g == nil {
		return ""
	}
	return f.g.ledgers.String()
}

func (f ledgerFlags) Set(s string) error {
	if err := f.g.ledgers.add(s); err != nil && f.g.ledgerErr == nil {
		f.g.ledgerErr = err
	}
	return nil
}

// add parses one --ledger value and adds it; the error never holds a
// password.
func (l *ledgerList) add(s string) error {
	f, err := parseLedger(s)
	if err != nil {
		return fmt.Errorf("--ledger: %w", err)
	}
	for _, g := range *l {
		if g.name == f.name {
			return fmt.Errorf("--ledger: ledger %q given twice", f.name)
		}
	}
	*l = append(*l, f)
	return nil
}

// parseLedger reads one --ledger value: NAME=COLLECTION, or NAME=URI when
// what follows the "=" has a scheme ("mongodb://" or "mongodb+srv://").
func parseLedger(s string) (ledgerFlag, error) {
	name, where, ok := strings.Cut(s, "=")
	shown := s
	if strings.Contains(where, "://") {
		shown = name + "=" + redact(where)
	}
	switch {
	case !ok || name == "" || where == "":
		return ledgerFlag{}, fmt.Errorf("want NAME=COLLECTION or NAME=mongodb://HOST:PORT/DB.COLLECTION, not %q", shown)
	case name == "default":
		return ledgerFlag{}, errors.New(`"default" names the default ledger, whose collection is --accounts`)
	}
	if !strings.Contains(where, "://") {
		return ledgerFlag{name: name, collection: where}, nil
	}
	uri, db, coll, err := splitNamespace(where)
	if err != nil {
		return ledgerFlag{}, fmt.Errorf("ledger %s: connection string %s: %v", name, redact(where), err)
	}
	return ledgerFlag{name: name, uri: uri, db: db, collection: coll}, nil
}

// splitNamespace reads a connection string whose path is a namespace,
// DB.COLLECTION, as MongoDB's tools write one. It returns the connection
// string with only DB in its path (which the driver reads as the database
// to authenticate against, as it would from mongosh's connection string),
// and the database and collection. A database name holds no ".", so the
// first "." ends it; a collection's name may hold more.
func splitNamespace(uri string) (clientURI, db, coll string, err error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || (scheme != "mongodb" && scheme != "mongodb+srv") {
		return "", "", "", errors.New(`want a "mongodb://" or "mongodb+srv://" scheme`)
	}
	userinfo := ""
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, rest = rest[:at+1], rest[at+1:]
	}
	hosts, query := rest, ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		hosts, query = rest[:i], rest[i:]
	}
	hosts, path, _ := strings.Cut(hosts, "/")
	ns, err := url.PathUnescape(path)
	if err != nil {
		return "", "", "", err
	}
	db, coll, ok = strings.Cut(ns, ".")
	if !ok || db == "" || coll == "" || strings.ContainsAny(coll, "/$") {
		return "", "", "", fmt.Errorf("its path must be the ledger's namespace DB.COLLECTION (mongodb://HOST:PORT/bank.accounts), not %q", ns)
	}
	if hosts == "" {
		return "", "", "", errors.New("no host")
	}
	return scheme + "://" + userinfo + hosts + "/" + url.PathEscape(db) + query, db, coll, nil
}

// hostsOf is a connection string without its path and options: the
// deployment it reaches, and its user information (redact it to print).
func hostsOf(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return uri
	}
	userinfo := ""
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, rest = rest[:at+1], rest[at+1:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + "://" + userinfo + rest
}

// ledger returns the --ledger flag of ledger name ("" is the default
// ledger, a collection of the flags' database) and whether it was given.
func (g *globals) ledger(name string) (ledgerFlag, bool) {
	if name == "" {
		return ledgerFlag{collection: g.accounts}, true
	}
	for _, f := range g.ledgers {
		if f.name == name {
			return f, true
		}
	}
	return ledgerFlag{}, false
}

// ledgerName is how output names a ledger.
func ledgerName(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// flagSet returns the flag set of cmd. The flag package prints nothing:
// parse reports a bad flag as a usage error of one line.
func (cl *cli) flagSet(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("twopc "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // -h prints the help, in parse
	cl.fs = fs
	return fs
}

// parse parses args for cmd, flags and positional arguments in any order
// (after "--", everything is positional), and returns the positional
// ones, of which there must be between least and most. -h prints the help on
// stdout and ends the command with status 0; a usage error ends it with
// status 2, its one line and where to read more on stderr (see cli.exit).
func (cl *cli) parse(cmd *command, fs *flag.FlagSet, args []string, least, most int) ([]string, error) {
	var rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				cl.commandHelp(cl.stdout, cmd, fs)
				return nil, &exitError{code: exitOK}
			}
			return nil, usageErrorf("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	positional = append(positional, rest...)
	switch {
	case len(positional) < least:
		return nil, cl.usage(cmd, fs, "missing %s", cmd.args)
	case len(positional) > most:
		return nil, cl.usage(cmd, fs, "unexpected argument %q", positional[most])
	}
	return positional, nil
}

// usage is a usage error of cmd: exit status 2. cli.exit prints it on one
// line, with where to read more (twopc help COMMAND), not the whole help.
func (cl *cli) usage(cmd *command, fs *flag.FlagSet, format string, a ...any) error {
	return usageErrorf(format, a...)
}
