package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program's name), writing
// results to stdout and messages to stderr, and returns the exit status.
// ctx ends on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cl := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return cl.exit(cl.dispatch(ctx, args))
}

// cli is where a run writes, and the environment it reads.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// cmd is the command being run ("" before one is found), args its
	// command line and fs its flags, for exit to say which command failed
	// and whether its output is JSON.
	cmd  string
	args []string
	fs   *flag.FlagSet
	// wroteJSON says a JSON document went to stdout: a failure after it
	// adds no error document.
	wroteJSON bool
}
