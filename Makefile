# twopc: the library is the root module; the dev server, the demo and
# anything else heavy live in the nested module in examples/.

ADDR ?= 127.0.0.1:27017
GO   ?= go
SHELL := /bin/bash

.PHONY: test demo banks metrics devserver vet fmt check soak bench api

# test runs every test of both modules (.ci/test), in parts at once: with
# the race detector, against MONGODB_URI, a testcontainers MongoDB if Docker
# answers, or the dev server (built once for every part; one of them, the
# external dev server, started first on a free port and stopped at the
# end); a short fuzz of Transfer's inputs; the randomized simulations again
# on a dev server that pauses inside commands; and, without -race, each
# examples package that can reach a server either way the other way. Each
# part prints a line per package as the package finishes, a failing test's
# whole output, and a line for the part (GOTEST_VERBOSE=1 prints
# everything). The last line is "N passed, M failed", over all the parts,
# counting top-level tests: test functions, examples and fuzz targets, not
# their subtests apart. The long runs keep a smaller size here; make soak
# runs them at full size. When the root module's other packages ran
# against another server than a dev server, they run again against the
# external one; EXTERNAL_ROOT_PKGS set to other than its default runs that
# pass in any case (./... adds the library's own tests).
EXTERNAL_ROOT_PKGS ?= ./cmd/... ./internal/...
test:
	@EXTERNAL_ROOT_PKGS='$(EXTERNAL_ROOT_PKGS)' .ci/test

# soak runs the long runs at full size, each part with a summary (.ci/soak):
# the history bound over 20,000 transfers; 480 transfers each followed at
# once by a transfer of the money it moved; statements and balances read
# while two Recoverers archive (then remove) 400 transfers; the randomized
# simulation of SOAK_TRANSFERS transfers with more applications, workers
# and accounts, for each of its four seeds (SEED=n runs that seed only); the duplicate-and-delay
# test over SOAK_REPLAY transfers, every write command delivered again; the
# repeats' acceptance run, 200 keyed calls of each kind cut short and each
# repeated at once in the coordinator that made it, another, or another
# process; the refunds' acceptance run, 150 transfers of 2 to 5 legs each
# refunded in 1 to 10 parts from two coordinators at once, then to zero;
# the change feed's load run, SOAK_FEED transfers from 8 goroutines with
# two sequencers (at the default 10 s lease), the holder stalled and taken
# over twice and restarted once during it, an All reader and two
# subscriber groups, each committed transfer checked once in the feed, the
# reader and each group (make test runs it at 120 transfers and a 300 ms
# lease); FuzzTransfer for 30,000 inputs (make test tries 1,000).
SOAK_TRANSFERS ?= 1500
SOAK_REPLAY    ?= 600
SOAK_HISTORY   ?= 20000
SOAK_FEED      ?= 2000
soak:
	@SOAK_TRANSFERS=$(SOAK_TRANSFERS) SOAK_REPLAY=$(SOAK_REPLAY) SOAK_HISTORY=$(SOAK_HISTORY) SOAK_FEED=$(SOAK_FEED) SEED=$(SEED) .ci/soak

# demo seeds two accounts and runs transfers, printing each step with the
# state it leaves.
demo:
	cd examples && $(GO) run ./cmd/demo

# The commands that run until interrupted (banks -serve, metrics, devserver)
# are built outside the tree (BIN: twopc-bin beside the Go build cache, in
# the user's cache directory, so that they run from a read-only clone) and
# run with exec, not with go run: go run exits 1
# when interrupted, whatever the program did, which make reports as an
# error. Run so, the program is make's own child: Ctrl-C reaches it (as
# does the SIGTERM make passes on), it shuts down cleanly and exits 0, and
# make reports no error.
BIN ?= $(dir $(shell $(GO) env GOCACHE))twopc-bin
run = cd examples && $(GO) build -o $(BIN)/$(1) ./cmd/$(1) && exec $(BIN)/$(1)

# banks runs two-phase commit's classic two-banks example: a transfer
# between two banks, each its own dev server (started in-process), printing
# each step; one bank stops mid-transfer.
# The servers stop when it ends; ARGS=-serve keeps both up until interrupted
# and prints the twopc command lines that operate them.
banks:
	$(call run,banks) $(ARGS)

# metrics runs transfers in a loop (some overdrawn, some dying before their
# commit point for a Recoverer to finish) and serves their Prometheus
# metrics on http://$(METRICS_ADDR)/metrics until interrupted (exit 0).
METRICS_ADDR ?= 127.0.0.1:2112
metrics:
	$(call run,metrics) -addr $(METRICS_ADDR)

# devserver runs the dev server in the foreground until interrupted (exit 0);
# its first line is the URI. Its data goes to a fresh temporary directory,
# removed when it stops; DIR=path keeps it in path instead (created if
# missing; a relative path is from this directory), for the next start
# with the same DIR: make devserver DIR=.devdata.
DIR ?=
devserver:
	$(call run,devserver) -addr $(ADDR)$(if $(DIR), -dir "$(if $(filter /%,$(DIR)),$(DIR),$(CURDIR)/$(DIR))")

vet:
	$(GO) vet ./...
	cd examples && $(GO) vet ./...

fmt:
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

check: vet fmt test

# bench runs the account-transfer scenario of mongodb-schema-simulator,
# scaled down, for the library and the tutorial's protocol over a sweep of
# concurrency levels, against MONGODB_URI or an in-process dev server, and
# regenerates BENCHMARKS.md's results and bench/chart.png (a few minutes on
# the dev server). More flags: make bench BENCHFLAGS="-workers 32 -rate 500".
bench:
	cd examples && $(GO) run ./cmd/bench -update ../BENCHMARKS.md -chart ../bench/chart.png $(BENCHFLAGS)

# api rewrites api.txt, the listing of the public API that .ci/run checks
# nothing was removed from: run it after adding to the API, and commit it.
api:
	$(GO) run ./internal/apilist . > api.txt
