// Command twopc operates the transfers of github.com/twopc/twopc on a
// MongoDB database: it shows them, finishes those whose process stopped,
// cancels and reverses them, reads the change feeds, audits the
// protocol's invariants, and checks that a server gives the
// single-document atomicity the protocol rests on.
//
// Install it from a clone of the repository, or run it there (nothing
// is published yet, so go install github.com/twopc/twopc/cmd/twopc@latest
// finds no module):
//
//	go install ./cmd/twopc   # into $(go env GOPATH)/bin
//	go run ./cmd/twopc status
//
// # Usage
//
//	twopc COMMAND [flags] [arguments]
//	twopc help [COMMAND]
//	twopc COMMAND -h
//
// The commands:
//
//	status   transactions by state, the oldest unfinished one, which applications are active, the change feeds
//	list     transactions, filtered, least recently touched first
//	show     one transaction (by id or idempotency key), every field, and the account of each of its legs
//	account  one account: balance, held and pending amounts, and its markers
//	accounts the accounts of a ledger, by id, of an asset or all, by pages
//	statement  an account's entries with their running balance
//	balance  an account's balance at a time, from its entries
//	feed     a change feed's events, in order, or --follow them; feed status NAME its groups' lag; feed delete NAME deletes one
//	recover  finish stale transactions: one recovery pass, or a pass every --interval
//	cancel   roll back a transaction that has not reached its commit point
//	reverse  undo a committed transfer with a transfer back
//	capture  capture a held transfer (a hold): all of it, or part of a two-leg one
//	void     void a held transfer (a hold): what no capture took returns, it ends canceled
//	audit    check the protocol's invariants on the live system
//	doctor   check that the server gives the single-document atomicity twopc needs
//
// Flags may be written -flag or --flag, before or after the arguments.
// A usage error (an unknown command or flag, a bad argument) prints one
// line on stderr saying what is wrong, and where to read more ("Run
// 'twopc help COMMAND' for its usage."), not the whole help; twopc help
// COMMAND, or twopc COMMAND -h, prints a command's help and flags.
//
// # Connecting
//
// Every command takes the server's connection string from --uri, else
// from MONGODB_URI, and the database from --db, else from the connection
// string's path, as mongosh does (mongodb://127.0.0.1:27017/bank names
// bank); with neither, it stops with a usage error and says so. The other
// flags every command takes:
//
//	--accounts COLLECTION      the default ledger's accounts (default accounts)
//	--transactions COLLECTION  the transactions, the log (default transactions)
//	--application NAME         the name the tool claims transactions under when it
//	                           takes one over, cancels or reverses (default twopc-cli);
//	                           in list, a filter instead
//	--json                     one JSON document on stdout, for scripts
//	--connect-timeout D        how long to wait for the server (default 10s)
//
// and show, account, recover, cancel, reverse, capture, void and audit take
// --ledger, repeatable:
// a ledger (see twopc.WithLedger) and where its accounts are, either
//
//	--ledger NAME=COLLECTION   a collection of the log's database
//	--ledger NAME=URI          a collection anywhere: a connection string
//	                           whose path is the namespace DB.COLLECTION, as
//	                           MongoDB's tools write one, for example
//	                           beijing=mongodb://127.0.0.1:27018/bank.accounts
//
// The tool connects once per connection string (ledgers of one string
// share a client; one whose string differs from the log's, even on the
// same deployment, gets a client of its own) and checks each primary
// answers before it starts. The database in a ledger's path is also the
// one its credentials are checked against, as in any connection string:
// for a user defined in admin, add ?authSource=admin. Errors and output
// show a connection string with its password and options hidden. recover
// leaves an unfinished transaction with a leg on a ledger not given to a
// recoverer that has it, untouched, and exits 1 naming the ledger; cancel
// and reverse refuse such a transaction.
//
// The read commands audit, list, statement, balance, account and
// accounts refuse a database that holds none of the collections the flags
// name in it (the accounts, the transactions, and, where given, the
// archive and each --ledger NAME=COLLECTION): they say so, naming the
// collections the database has, and exit 1, rather than report no
// account, no transfer or a clean audit of a database that is the wrong
// one. One collection of them is enough: after EnsureIndexes both the
// accounts and the transactions exist. status refuses a database with no
// transactions collection (see Status).
//
// # Amounts
//
// Every command prints an amount one way: with its asset's scale where
// the asset's code has one ("USD/2": 2 decimal places, so 1250 minor
// units print as 12.50 USD/2), and otherwise as a whole number: minor
// units for an account or transfer of no asset, which each output says
// once ("Amounts of no asset are in minor units."), and whole units for
// a code with no scale or a scale of 0. It takes amounts the same way:
// capture's AMOUNT and audit's --total N are written as it prints them,
// with exactly the asset's decimal places (22.00 for USD/2; "22.00
// USD/2" is read too), and a bare integer for an asset with decimal
// places is a usage error, never read as minor units or as whole units;
// capture --minor N and audit --minor give minor units instead. --json
// prints the integers stored, in minor units, with the asset code beside
// them.
//
// # Status
//
// twopc status counts the transactions by state (and those in no state
// the protocol knows), gives the oldest unfinished one (initial, pending,
// applied or canceling) and how long it has been untouched, by its
// lastModified against the server's clock (hello's localTime, as the
// library judges staleness), and lists, for each application, how many
// transactions it was the last to write in the last --window (default
// 10m) and when. A coordinator writes its application name on the
// transactions it creates, and a recoverer or canceler writes its own on
// those it takes over, so an old unfinished transaction with no
// recoverer in that list means none is running. Holds (state held) are
// counted apart, with the one held longest (by heldAt): a hold waits for
// its capture or void as long as its caller likes, and is never taken over
// for being old (its expiry, if it has one, is judged apart). On a
// database with no transactions collection of the name --transactions
// gives, status says so, naming the collections the database has, and
// exits 1: the database or collection named is not the log (or no
// transfer was ever made there), and counting would say "none". Status
// then lists the change feeds (see Feeds), deleted ones too: each one's
// last published batch, its sequencer's epoch, the lease holder and when
// its lease ends ("none" if none holds it), how often it was taken over,
// how many transactions wait to be numbered (how far the sequencer is
// behind; the count stops at 1000), and whether it was deleted (--json:
// "feeds": [{"name", "since", "published", "epoch", "holder",
// "leaseEnds", "takeovers", "waiting", "gone", "deleted"}]).
//
// # List
//
// twopc list prints the transactions matching every filter given, least
// recently touched first, at most --limit (default 50; 0 for all):
// --state STATE (repeatable or comma-separated; "unfinished" and "final"
// name groups), --account ID (a transfer's source or destination, or any
// leg's account; matched as a string, and as a number or ObjectID when it
// reads as one; a document id as Extended JSON), --ledger NAME (a leg in
// that ledger; "default" or "" for the default ledger; with --account,
// that account in that ledger), --older-than DURATION (untouched for
// longer, by the server's clock), --application NAME, --meta KEY=VALUE
// (repeatable: metadata given with twopc.WithMetadata), --key KEY (the
// transaction of that idempotency key, twopc.WithKey: read by the _id
// the library derives from the key). Each transaction's legs are listed
// with their amounts, and a hold with what its captures charged and,
// once it ended (captured, voided or expired), what it released
// ("alice → shop 3.00 USD/2, captured 1.20 USD/2 in all, 1.80 USD/2
// released"; "captured nothing" for a hold voided with none). With --archive
// COLLECTION it reads the archive that twopc.WithHistory moves final
// transactions to, as well as the log, and says where it found each
// (foundIn: log or archive); see Archived transactions.
//
// # Show
//
// twopc show ID prints transaction ID with every field, and for each leg
// the account document in the leg's ledger: balance, pendingCredit and
// pendingDebit, the markers in pendingTransactions, the fences in
// fencedLegs (how many, and their transactions' times), the fence line
// fencedBefore, and what the account
// shows of the leg: applied (its marker is in pendingTransactions),
// closed (settled or undone: fenced, or behind the fence line), or not
// applied. A leg's marker is the transaction's id with its last byte set
// to the leg's index. It says where it found the transaction: in the log,
// or, with --archive COLLECTION, in the archive. twopc show KEY finds the
// transaction of idempotency key KEY instead (as GetByKey does: by the
// _id the library derives from the key): an argument of 24 hexadecimal
// digits is read as an id first, and as a key if no transaction has that
// id; any other as a key (--json: "foundBy": "id" or "key"). A hold
// shows what it captured beside its value ("captured 1.20 USD/2 (of its
// value 3.00 USD/2; the rest returned to the source)"), or "nothing yet"
// while it is held, and once it ended what it released; a hold voided or
// expired after captures says what they took before it was voided.
//
// # Account
//
// twopc account ID prints account ID as the library reads it
// (Ledger.Account): its balance (available: debits in flight are out of
// it, credits in flight not yet in), held (its pendingDebit: debits
// applied and not settled; and of that, heldByHolds, what the holds held
// on it reserve), and pendingCredit (credits applied and not settled).
// Then its markers: each leg in flight on it (a marker in
// pendingTransactions: the transaction, the leg's index, and from the log
// the transaction's state, application and the leg's amount; a marker
// whose transaction the log does not hold is said so), and its fences
// (fencedLegs: how many, and the times of their transactions) and fence
// line (fencedBefore).
// A tombstone is
// shown as one. ID is matched as list --account matches it, and every
// document that matches is shown. The account is read in the default
// ledger and in every ledger given with --ledger NAME=COLLECTION or
// NAME=URI, each found shown with its ledger; --ledger NAME alone (as
// list takes it; "default" for the default ledger) reads only the ledgers
// so named, whose collections must be given. Exit status 1 if no ledger
// read holds it. With --json: {"accounts": [{"ledger", "id", "balance",
// "held", "heldByHolds", "pendingCredit", "pendingLegs": [...],
// "fencedLegs": [...], "fencedBefore",
// "tombstone"}]}.
//
// # Accounts
//
// twopc accounts lists the accounts of a ledger (Coordinator.Accounts) in
// the order of their ids as the server sorts them (numbers, strings,
// documents, ObjectIDs, ...), tombstones left out: each with its balance,
// held, pendingCredit, limits and how many transactions are in flight on
// it. --asset CODE keeps one asset's; --limit N (default 100, at most
// 1000) prints a page and, when more follow, the --after TOKEN of the
// next; --ledger NAME lists another ledger (its collection given with
// --ledger NAME=COLLECTION or NAME=URI). An account the library cannot
// read stops it with exit status 1, naming it. With --json: {"ledger",
// "accounts": [{"id", "balance", "held", "pendingCredit", "asset",
// "floor", "ceiling", "pendingTransactions"}], "next"}.
//
// # Statement and balance
//
// twopc statement ACCOUNT prints the account's entries (Coordinator.Statement):
// one per leg of a committed transfer on it, in commit order, with its
// time, transaction, signed amount, the balance after it, and the
// transfer's key and metadata, a transfer's entry as soon as the call
// that made it returned. --since and --until (RFC 3339) bound their
// times, --limit N (default 100) prints a page and, when more follow, the
// --after TOKEN of the next; --reverse lists newest first. twopc balance ACCOUNT --at
// TIME prints its balance then (Coordinator.BalanceAt; default now); a
// time before OpenAccount opened the account, with no entry at or before
// it, is refused (exit status 1) naming when it was opened, and an
// account inserted by hand, which records no opening time, has its
// opening balance at any time before its first entry.
// --ledger NAME reads another ledger, --archive COLLECTION the archive
// too. With --json: {"ledger", "account", "entries": [{"txn", "at",
// "amount", "balance", "key", "metadata"}], "next"} and {"ledger",
// "account", "at", "balance", "asset"}.
//
// # Feeds
//
// twopc feed NAME prints the events of change feed NAME (Coordinator.Feed,
// Feed.Read): each transaction's committed, held, captured, voided,
// expired or canceled event, one line each with its position, kind, time,
// transaction, legs and event ID, from the batches its sequencer
// (Feed.Run, which the tool never runs) published, in batch order.
// --after POS starts after a position a line printed (default: the
// start); --limit N (default 100; 0: all) prints a page and, when more
// follow, the --after POS of the next; --follow (Feed.All) keeps reading
// until SIGINT or SIGTERM, and exits 0. Delivery is at least once, none
// skipped, the same order at every read, an event read again with the
// same ID; positions are opaque, taken from the output. A position older
// than what the feed keeps (history moved transactions of its batches out
// of the log: twopc.ErrFeedTruncated), a deleted feed
// (twopc.ErrFeedDeleted), and a name no feed has are refused, exit status
// 1; a bad name, or a position the feed refuses (twopc.ErrInvalidFeed),
// is a usage error. With --json, one object a line: {"id", "kind", "pos",
// "at", "transaction"}, the transaction as stored with the state the
// event left it in, and a last line {"error", "exitStatus"} if it failed
// after the first. twopc feed status NAME prints the feed as status lists
// it and each of its subscriber groups: its saved position, how many
// published events it has not acknowledged, the oldest one's time and
// how long ago that was. twopc feed delete NAME deletes the feed
// (Feed.Delete): its name is not used again.
//
// # Archived transactions
//
// twopc.WithHistory(keep, archive) moves each final transaction, once its
// time to keep has passed, out of the log into an archive collection, and
// records the archive's name in the transaction's archive field. show and
// list read it when given --archive COLLECTION (a collection of the log's
// database); without it they read the log alone, and show of an archived
// id says it is not in the log and to give --archive. The library moves a
// transaction by inserting it into the archive, then deleting it from the
// log, so show reads the archive, then the log, then the archive again,
// and list reads the log, then the archive: a transaction that moves
// while they read is found. A transaction's late duplicate writes can
// bring a copy of it back into the log after it was archived; when both
// hold an id, the archive's record, the first, is the transaction: show
// shows it and names the copy (logCopy), and list lists it once, from the
// archive, if the archive's record matches the filters (alsoInLog: true).
// cancel, reverse, capture and void take --archive too: the library's
// lookups then read the archive as well, so that cancel of an archived
// transfer answers from its first record, and --placeholder writes no
// placeholder for it. Without --archive an archived id looks unknown to
// them, and cancel --placeholder would write one and report it canceled.
//
// # Recover
//
// twopc recover makes one recovery pass (Recoverer.RecoverOnce) and
// prints what it did: applied transactions settled, stale pending ones
// rolled forward (or back when no leg was applied), canceling ones
// finished, and final transactions
// past the time to keep recorded in them (twopc.WithHistory) removed, or
// moved to the archive given with --archive NAME if they were recorded for
// that archive. A transaction is stale
// once untouched for longer than the lease recorded in it (the longest
// StaleAfter of the processes that claimed it), so each is judged by its
// owners' settings, never sooner than --min-lease (default 10s), which is
// also the tool's own StaleAfter while it drives one it took over. A pass
// that leaves an unfinished transaction because its lease has not run
// out says, for each one, when it becomes eligible: its lastModified
// plus the longer of its recorded lease and --min-lease, by the server's
// clock (--json: waiting, with eligibleAt); one left for the floor alone
// (untouched for longer than its recorded lease, not for longer than
// --min-lease) is said so, with how long it has been untouched and its
// lease (--json: minLeaseSkipped); a later pass takes each over once
// eligible.
// --watch makes a pass every --interval (default 30s) until SIGINT or
// SIGTERM, printing each pass's report (with --json, one JSON document
// per line), and exits 0 when stopped. The report lists each transaction
// the pass took over (or voided for its expiry), in the state it found
// it, with the application that made it (see Who made a transaction). Progress goes to stderr every two
// seconds of a long pass; --quiet silences it.
//
// # Cancel and reverse
//
// twopc cancel ID cancels a transaction that has not reached its commit
// point (Canceler.Cancel): it ends canceled, its applied legs undone. It
// is refused for a transaction past its commit point (use reverse), and
// for one a process owns (whatever its application name: ownership is
// per process, never per name) and touched within its lease; that refusal
// says when it becomes cancelable (its lastModified plus the longer of
// its recorded lease and --min-lease, by the server's clock; --json:
// eligibleAt). An id
// that names no transaction is refused unless --placeholder is given:
// then a canceled placeholder is written under it, which settles for good
// a Transfer whose outcome was unknown (its insert, if it arrives, cannot
// become a transfer).
//
// twopc reverse ID undoes a committed transfer (Coordinator.Reverse): a
// new transfer of the same amounts the other way, under a key derived
// from ID, so reversing twice moves the money back once. The tool waits
// for the reversal to settle before it exits.
//
// # Capture and void
//
// twopc capture ID AMOUNT captures hold ID (Coordinator.Capture): AMOUNT
// reaches the destination and, for a hold of two legs captured in part,
// the rest returns to the source; a hold of more legs is captured whole.
// AMOUNT is written as the hold's amounts print (22.00 for a hold of
// USD/2; a bare 22 is a usage error), or given in minor units with
// --minor N (twopc capture ID --minor 2200).
// twopc void ID voids it (Coordinator.Void): nothing moves, and it ends
// canceled. Capture, void and a hold's expiry race through one guarded
// write: whichever lands first decides, and the others are refused (exit
// status 1) naming what happened; repeating the winning command succeeds.
// Both wait for the hold to settle or roll back before they exit. cancel
// of a hold that is held voids it.
//
// # Who made a transaction
//
// A transaction's application field names the application that holds its
// claim: the coordinator that made it, until another process claims it.
// The library writes the claimer's name there when the tool takes a
// transaction over (recover), cancels it, captures or voids a hold (and
// when a recoverer voids an expired hold), and keeps no other record of
// the maker; settling and reverse leave it. So after the tool finishes a
// transaction, show, list and status name the tool (twopc-cli, or
// --application) as its application. The commands that claim print the
// application the transaction named before they did, beside their own:
// cancel, capture and void as "made by payments-1, captured by
// twopc-cli" (--json: madeBy and finishedBy), recover for each
// transaction it took over (transactions[].madeBy). The tool never
// rewrites the stored claim to put the maker back.
//
// # Audit
//
// twopc audit checks the invariants (Coordinator.Audit) over the
// transactions and the accounts of every ledger given, reading at
// majority, in batches of --batch, and writing nothing. Each check is a
// kind of violation: no marker of a leg in flight names a final or
// missing transaction (orphan-marker); no unfinished transaction is
// untouched past its lease plus --grace, default 30s (stale); no account
// holds a pending credit or held debit with no leg in flight
// (held-without-marker); no account holds more than --max-pending
// markers or --max-fences fences (marker-bound); every document has the
// shape the protocol writes, and no ledger's sum leaves int64
// (malformed); every hold held has its legs' markers and amounts on its
// accounts (hold-not-on-account); an account with limits has the rooms
// its balance, sums in flight and limits make (rooms) and is within them
// (outside-limits); and each --total holds (total; checked when nothing
// is in flight). It prints what it read and every violation, and exits 1
// if there is one.
//
// --total states a sum of balances and held debits: LEDGER=N a whole
// ledger's ("" or "default" for the default ledger), LEDGER:ASSET=N that
// of the ledger's accounts of asset ASSET (none for those with no
// asset), and ASSET=N the same in the default ledger when ASSET names no
// ledger given (--total USD/2=0.00). N is written as the audit prints
// totals (see Amounts): 1000.00 for USD/2, a whole number of minor units
// for no asset; a whole ledger's is checked against the asset the audit
// finds its accounts of, after the audit; --minor reads every N as minor
// units. A ledger's total is
// refused, exit status 1, when the audit finds its accounts of more than
// one asset, or of an asset and none (AuditReport.Assets): it would add
// different assets together; state each asset's instead. Two --total
// that name the same sum are a usage error.
//
// # Doctor
//
// twopc doctor checks, in a scratch collection of the database that it
// drops afterwards, what the protocol rests on: 20 goroutines × 50
// concurrent $inc of one document must end at 1000, and of 20 concurrent
// conditional claims ({_id, state: "initial"} → "claimed") exactly one must
// win; and what the library needs besides: hello's localTime, majority
// read concern, majority write concern. It reports, without requiring
// them, multi-document transactions (for internal/native's comparison;
// twopc does not use them), partial indexes (EnsureIndexes makes a sparse
// index without them), and the server's name and version from buildInfo
// (FerretDB adds ferretdbVersion). Run it before trusting FerretDB, Amazon
// DocumentDB, Azure Cosmos DB or any server that speaks MongoDB's
// protocol with money: FerretDB v1 alone loses concurrent updates and
// lets two claims win.
//
// On a sharded cluster it also checks the shard keys of the library's
// collections, and measures, through the router alone, the clock of each
// shard that holds the log against the router's (clock-skew): a document
// a shard in <transactions>_clockprobe, which doctor shards on
// {_id: "hashed"} the first time (the enableSharding privilege) and keeps,
// upserted with $currentDate and compared with hello's localTime, each
// figure an interval of the two round trips (skew ± half its width). It
// fails when the largest skew is, or cannot be shown not to be, past a
// quarter of the page tokens' horizon (250 ms of 1 s), or a shard that
// holds the log was not measured: statements' pages and checkpoints rely
// on it (PROTOCOL.md, Clocks). --json gives the figures under clockSkew.
//
// # Output
//
// Results go to stdout, for people by default, and as one JSON document
// with --json (recover --watch --json and feed --json: one per line).
// The JSON is plain, for jq and any other reader: documents from the
// database keep their fields in stored order, with ObjectIDs as their 24
// hexadecimal digits (which show, cancel and the others take back), dates
// as RFC 3339 strings in UTC ("2024-11-22T10:04:05.123Z"), and numbers as
// numbers; binary data is base64, and a double that is not finite, a
// regular expression (/pattern/options) and the other rare types are
// strings.
// Errors, and progress of long passes, go to stderr; under --json, a
// failure also prints one JSON object on stdout, {"error": "...",
// "exitStatus": N}, unless the command printed its report already (audit
// and recover report what failed in it), and the exit status is the same:
//
//	twopc list --state unfinished --json | jq -r '.transactions[]._id'
//	twopc show 6740c1a2e4b0a1b2c3d4e500 --json | jq -r '.error // .transaction.state'
//
// # Exit status
//
//	0  done; for audit and doctor, nothing wrong found
//	1  a check failed (audit found a violation, doctor found the server
//	   unfit), or the operation was refused: past its commit point, owned by
//	   a live process, no such transaction or account, a reversal that
//	   cannot apply, no transactions collection (status), none of the
//	   collections named (audit, list, statement, balance, account,
//	   accounts), a ledger's --total over several assets (audit), a
//	   balance before the account was opened (balance), no such feed, a
//	   feed deleted or read from before what it keeps (feed)
//	2  usage error: an unknown command or flag, a bad argument, no database
//	   named, a ledger needed and not given, an amount not written as its
//	   asset's are shown (capture, audit --total), a feed's name or
//	   position that cannot be one (feed)
//	3  cannot connect, the server failed a command, or interrupted
//
// # Examples
//
// Against the development server (make devserver, in the repository):
//
//	export MONGODB_URI=mongodb://127.0.0.1:27017/bank
//	twopc doctor
//	twopc status
//	twopc list --state unfinished --older-than 5m
//	twopc show 6740c1a2e4b0a1b2c3d4e500
//	twopc show order/o-17
//	twopc account alice
//	twopc accounts --asset USD/2
//	twopc recover --watch --interval 30s
//	twopc feed audit --follow
//	twopc cancel 6740c1a2e4b0a1b2c3d4e500
//	twopc audit --total default=100000 --json | jq .ok
package main
