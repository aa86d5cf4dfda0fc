# Development tasks. `make test` is the one command that runs every test:
# the library's (against an embedded FerretDB server it builds itself, or the
# server in MONGODB_URI), the embedded server's, the sample app's, including
# its end-to-end test in headless Chromium, and the telemetry's (oteltest,
# with the OpenTelemetry SDK the library's go.mod leaves out).

GO ?= go
MODULES := . embeddb example ginstore bench oteltest
# Extra flags for go test, e.g. TESTFLAGS=-v (CI's DocumentDB leg, to see skips).
TESTFLAGS ?=
# Executions per fuzz target: a count, not a duration. A duration can end in
# a spurious "context deadline exceeded" on a loaded machine, a race in Go's
# fuzzing coordinator (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME ?= 40000x
FUZZ_TARGETS := FuzzDecodeCookie FuzzDecodeDocument FuzzCompactCodec FuzzGobFallback FuzzJSONCodec

.PHONY: test test-start test-docdb vet fmt-check fuzz bench run browser

# Each stage says what it does and how long it takes, and then how long it
# took. The estimates are the times of a fresh clone on a 2-core machine
# whose Go build cache already holds this code (about 6 minutes in all),
# against the embedded server. With a cold build cache (a new machine, or
# after changing the code) each stage first compiles with -race: minutes
# more, about 7 in all after a change, more on a new machine.
test: browser test-start vet
	@if [ -n "$$MONGODB_URI" ]; then server="the server in MONGODB_URI"; \
	else server="an embedded FerretDB v1 server (built by the tests)"; fi; \
	for m in $(MODULES); do \
		case $$m in \
		.) what="the library's tests"; t="~2 min";; \
		embeddb) what="the embedded server's tests"; t="~5 s";; \
		example) what="the sample app's tests, with headless Chromium"; t="~1 min";; \
		ginstore) what="the gin adapter's tests"; t="~10 s";; \
		bench) what="the benchmarks' tests"; t="~80 s";; \
		oteltest) what="the telemetry's tests (spans and metrics, with the OpenTelemetry SDK)"; t="~10 s";; \
		*) what="tests"; t="";; \
		esac; \
		start=$$(date +%s); \
		echo "== go test -race ./... in $$m: $$what, against $$server ($$t)"; \
		(cd $$m && $(GO) test -race -count=1 $(TESTFLAGS) ./...) || exit 1; \
		echo "== $$m: took $$(($$(date +%s) - start)) s"; \
	done

test-start:
	@echo "== make test: go vet, then the tests of $(words $(MODULES)) modules, one stage each (about 6 minutes on 2 cores with a warm build cache; minutes more for what it must compile)"

# The same tests against FerretDB v2 + PostgreSQL/DocumentDB, a server with
# real TTL indexes, built and started by ../shared/docdb/docdb.sh.
test-docdb:
	MONGODB_URI="$$(../shared/docdb/docdb.sh start | tail -n 1)" $(MAKE) test

vet:
	@echo "== go vet ./... in $(MODULES) (~5 s; about 6 minutes on a new machine, which first downloads and compiles every module)"; \
	start=$$(date +%s); \
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done; \
	echo "== vet: took $$(($$(date +%s) - start)) s"

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The sample app's browser test needs Chromium; install Debian's package
# when it is missing and we may (root with apt-get).
browser:
	@if ! command -v chromium >/dev/null 2>&1 && [ -z "$$CHROMIUM_PATH" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "== installing chromium (Debian package) for the browser test"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "chromium is missing: install it (apt-get install chromium) or set CHROMIUM_PATH"; \
		fi; \
	fi

fuzz:
	@for f in $(FUZZ_TARGETS); do \
		echo "== fuzz $$f for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) . || exit 1; \
	done

# Go benchmarks of the bench module (bench/bench_test.go): the store's load,
# save and middleware beside the bare driver sending the same commands, and
# the default codec's share, with allocations; against MONGODB_URI or, when
# it is empty, an embedded FerretDB v1 server in process. Extra flags in
# BENCH_FLAGS, e.g. BENCH_FLAGS='-benchtime=2000x -bench=Load'.
BENCH_FLAGS ?=
bench:
	$(GO) test -C bench -run='^$$' -bench=. -benchmem -count=1 $(BENCH_FLAGS) .

# go run prints nothing while it builds: say so first.
run:
	@echo "== building the sample app and the embedded FerretDB: about a minute the first time (2 cores), seconds after; then it prints its database URI and listens on $${ADDR:-127.0.0.1:8080}"
	cd example && $(GO) run .

# The benchmarks are the nested module bench (its own go.mod, so that this
# one needs neither FerretDB nor mongo-driver v1): one command, bench, with
# a subcommand each. See bench/main.go.
#
# Scale benchmark (bench scale): load latency, expiry and per-user listings
# at 10k, 100k (and with SCALE_FLAGS='-n 10k,100k,1m', 1M) sessions, against
# MONGODB_URI or, when it is empty, the embedded FerretDB v1 server, run in
# process.
SCALE_FLAGS ?=
.PHONY: scale
scale:
	$(GO) run -C bench . scale $(SCALE_FLAGS)

# HTTP load benchmark (bench http): requests through the store and its
# middleware against the bare driver sending the same commands, and against
# github.com/laziness-coders/mongostore (mongo-driver v1; what
# gin-contrib/sessions wraps), all in the same interleaved rounds, req/s
# ratios in markdown tables; against MONGODB_URI or, when it is empty, the
# FerretDB v2 + DocumentDB server of ../shared/docdb/docdb.sh. Flags in
# BENCH_HTTP_FLAGS, e.g. BENCH_HTTP_FLAGS='-users 16 -rounds 5 -cpuprofile cpu.pprof'
# (paths relative to this directory).
BENCH_HTTP_FLAGS ?=
.PHONY: bench-http
bench-http:
	@uri="$${MONGODB_URI:-}"; \
	if [ -z "$$uri" ]; then \
		uri="$$(../shared/docdb/docdb.sh start | tail -n 1)"; \
		case "$$uri" in mongodb://*) ;; *) echo "$@: ../shared/docdb/docdb.sh start gave no URI" >&2; exit 1;; esac; \
	fi; \
	dir="$$(mktemp -d)" && trap 'rm -rf "$$dir"' EXIT && \
	$(GO) build -C bench -o "$$dir/bench" . && \
	echo "== bench http against $$uri" && \
	MONGODB_URI="$$uri" "$$dir/bench" http $(BENCH_HTTP_FLAGS)

# Lost updates (bench conc): one client's overlapping requests through the
# store's middleware, each setting a session key of its own after all have
# loaded the session; it fails when a key a 200 response set is missing
# afterwards, or on a status but 200. Against MONGODB_URI or, when it is
# empty, the embedded FerretDB v1 server, run in process. Flags in
# BENCH_CONC_FLAGS, e.g. BENCH_CONC_FLAGS='-trials 1000 -overlap 4'.
BENCH_CONC_FLAGS ?=
.PHONY: bench-conc
bench-conc:
	$(GO) run -C bench . conc $(BENCH_CONC_FLAGS)
