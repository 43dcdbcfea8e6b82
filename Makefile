# twopc: the library is the root module; the dev server, the demo and
# anything else heavy live in the nested module in examples/.

ADDR ?= 127.0.0.1:27017
GO   ?= go

.PHONY: test demo devserver vet fmt check

# test runs every test of both modules with the race detector, against
# MONGODB_URI, a testcontainers MongoDB if Docker answers, or the dev server.
test:
	$(GO) test -race -count=1 ./...
	cd examples && $(GO) test -race -count=1 ./...

# demo seeds two accounts and runs transfers, printing each state change.
demo:
	cd examples && $(GO) run ./cmd/demo

# devserver runs the dev server in the foreground; its first line is the URI.
devserver:
	cd examples && $(GO) run ./cmd/devserver -addr $(ADDR)

vet:
	$(GO) vet ./...
	cd examples && $(GO) vet ./...

fmt:
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

check: vet fmt test
