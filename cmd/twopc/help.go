package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string
	args    string // its positional arguments, as its usage line shows them
	summary string
	help    string // what it does, and examples
	run     func(ctx context.Context, cl *cli, cmd *command, args []string) error
}

// commands lists the subcommands, in the order help shows them.
var commands = []*command{
	statusCommand, listCommand, showCommand, accountCommand, accountsCommand, statementCommand, balanceCommand, feedCommand,
	recoverCommand, cancelCommand, reverseCommand, captureCommand, voidCommand, auditCommand, doctorCommand,
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// dispatch runs the subcommand args name.
func (cl *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		names := make([]string, len(commands))
		for i, c := range commands {
			names[i] = c.name
		}
		return usageErrorf("no command: give one of %s", strings.Join(names, ", "))
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			cl.help(cl.stdout)
			return nil
		}
		cmd := lookup(args[1])
		if cmd == nil {
			return cl.unknown(args[1])
		}
		return cmd.run(ctx, cl, cmd, []string{"-h"})
	}
	cmd := lookup(args[0])
	if cmd == nil {
		return cl.unknown(args[0])
	}
	cl.cmd, cl.args = cmd.name, args[1:]
	return cmd.run(ctx, cl, cmd, args[1:])
}

func (cl *cli) unknown(name string) error {
	return usageErrorf("unknown command %q", name)
}

// help prints the tool's help.
func (cl *cli) help(w io.Writer) {
	fmt.Fprint(w, `twopc operates the transfers of github.com/twopc/twopc on a MongoDB
database: it shows them, finishes those whose process stopped, cancels
and reverses them, reads the change feeds, audits the protocol's
invariants, and checks that a server gives the single-document
atomicity the protocol rests on.

Usage:
  twopc COMMAND [flags] [arguments]

Commands:
`)
	tw := table(w)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  help\tthis text, or a command's: twopc help COMMAND\n")
	_ = tw.Flush()
	fmt.Fprint(w, `
Every command takes:
  -uri STRING             the connection string (default $MONGODB_URI)
  -db NAME                the database (default: the connection string's path,
                          as mongosh reads it: mongodb://HOST:PORT/NAME)
  -accounts COLLECTION    the default ledger's accounts (default accounts)
  -transactions COLLECTION  the transactions, the log (default transactions)
  -ledger NAME=COLLECTION another ledger's accounts, in the same database,
  -ledger NAME=URI        or anywhere: the connection string's path is the
                          namespace (mongodb://HOST:PORT/DB.COLLECTION), DB
                          also its auth database unless ?authSource= is given
                          (show, account, recover, cancel, reverse, capture,
                          void, audit; repeatable)
  -archive COLLECTION     the archive twopc.WithHistory moves transactions
                          to: show, list, cancel, reverse, capture and void
                          read it as well as the log; recover moves those
                          recorded for it there
  -application NAME       the name the tool claims transactions under
                          (default twopc-cli; in list, a filter)
  -json                   one JSON document on stdout, for scripts: ids as
                          hex strings, times as RFC 3339; a failure prints
                          {"error": ..., "exitStatus": N} (feed, recover
                          --watch: one JSON object per line)
  -connect-timeout D      how long to wait for the server (default 10s)
Flags may be written -flag or --flag, before or after the arguments.

Amounts:
  shown with their asset's scale where its code has one (USD/2: 2
  decimal places, 12.50 USD/2), else as whole numbers: minor units for
  no asset, which each output says once. capture's AMOUNT and audit's
  --total N are taken as shown: for an asset with decimal places a bare
  integer is a usage error (22.00, not 22); --minor gives minor units
  instead. --json prints minor units, the integers stored.

Exit status:
  0  done; for audit and doctor, nothing wrong found
  1  a check failed (audit found a violation, doctor found the server
     unfit), or the operation was refused (past its commit point, owned by
     a live process, no such transaction or account, no transactions
     collection for status, none of the collections named for audit,
     list, statement, balance and account, a ledger's --total over
     several assets, a balance before the account was opened, no such
     feed, a feed deleted, or read from before what it keeps)
  2  usage error: the command line is wrong (an amount not written as its
     asset's are shown is one, as is a feed name or position that cannot
     be one)
  3  cannot connect, the server failed a command, or interrupted

Examples:
  MONGODB_URI=mongodb://127.0.0.1:27017/bank twopc status
  twopc list --uri mongodb://127.0.0.1:27017 --db bank --state pending --older-than 5m
  twopc recover --watch --interval 30s
  twopc feed audit --follow
  twopc audit --total default=100000 --json | jq .ok

Run 'twopc help COMMAND' or 'twopc COMMAND -h' for a command's flags and examples.
`)
}

// commandHelp prints cmd's help, with the flags fs holds.
func (cl *cli) commandHelp(w io.Writer, cmd *command, fs *flag.FlagSet) {
	usage := "twopc " + cmd.name + " [flags]"
	if cmd.args != "" {
		usage += " " + cmd.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", usage, strings.TrimSpace(cmd.help))
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
	fmt.Fprintln(w, "\nExit status: 0 done, 1 check failed or refused, 2 usage error, 3 server error (see twopc help).")
}
