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
FUZZ_TARGETS := FuzzDecodeCookie FuzzVerifySigned FuzzCookieValues FuzzDecodeDocument FuzzCompactCodec FuzzEncodesTo FuzzGobFallback FuzzJSONCodec

.PHONY: test test-start vet fmt-check fuzz bench run browser

# Each stage says what it does and about how long it takes, then how long
# it took; the last line is the total of the tests of every stage, "N
# passed, M failed" (subtests count). Estimates, on 2 cores against the
# embedded server: first with a warm build cache (the code already
# compiled), then with a cold one (a new machine, or after a change: each
# stage first compiles with -race). A failing stage does not stop the
# others; make test fails at the end.
test: browser test-start vet
	@if [ -n "$$MONGODB_URI" ]; then server="the server in MONGODB_URI"; \
	else server="an embedded FerretDB v1 server (built by the tests)"; fi; \
	log=$$(mktemp); trap 'rm -f "$$log"' EXIT; passed=0; failed=0; \
	for m in $(MODULES); do \
		case $$m in \
		.) what="the library's tests"; t="~3 min warm, ~5 cold";; \
		embeddb) what="the embedded server's tests"; t="~5 s warm, ~1 min cold";; \
		example) what="the sample app's tests, with headless Chromium"; t="~1 min warm, ~3 cold";; \
		ginstore) what="the gin adapter's tests"; t="~10 s warm, ~30 s cold";; \
		bench) what="the benchmarks' tests"; t="~1 min warm or cold";; \
		oteltest) what="the telemetry's tests (spans and metrics, with the OpenTelemetry SDK)"; t="~10 s warm or cold";; \
		*) what="tests"; t="";; \
		esac; \
		start=$$(date +%s); \
		echo "== go test -race ./... in $$m: $$what, against $$server ($$t)"; \
		(cd $$m && $(GO) test -race -count=1 -v $(TESTFLAGS) ./...) >"$$log" 2>&1; rc=$$?; \
		p=$$(grep -c -- '--- PASS' "$$log"); f=$$(grep -c -- '--- FAIL' "$$log"); \
		if [ $$rc -ne 0 ] && [ $$f -eq 0 ]; then f=1; fi; \
		if [ $$rc -ne 0 ]; then cat "$$log"; else grep -E '^(ok|FAIL|\?) |--- SKIP' "$$log"; fi; \
		passed=$$((passed + p)); failed=$$((failed + f)); \
		echo "== $$m: $$p passed, $$f failed; took $$(($$(date +%s) - start)) s"; \
	done; \
	echo "total: $$passed passed, $$failed failed"; \
	[ $$failed -eq 0 ]

test-start:
	@echo "== make test: go vet, then the tests of $(words $(MODULES)) modules, one stage each (on 2 cores: about 5 minutes with a warm build cache, about 10 with a cold one)"

vet:
	@echo "== go vet ./... in $(MODULES) (~10 s warm, ~3 min with a cold build cache; about 6 minutes on a new machine, which first downloads every module)"; \
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
# the default codec's share, with allocations and CPU time per operation;
# against MONGODB_URI or, when it is empty, an embedded FerretDB v1 server
# in process. It ends with the table of what the store costs beyond the
# bare driver (bench table; docs/performance.md shows one): the median of
# 5 rounds of 2,000 operations, store and driver interleaved in each. Extra
# flags in BENCH_FLAGS, e.g. BENCH_FLAGS='-count=1 -bench=Load'.
BENCH_FLAGS ?=
bench:
	@out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	$(GO) test -C bench -run='^$$' -bench=. -benchmem -benchtime=2000x -count=5 $(BENCH_FLAGS) . | tee "$$out" && \
	echo && $(GO) run -C bench . table < "$$out"

# go run prints nothing while it builds: say so first.
run:
	@echo "== building the sample app and the embedded FerretDB: 1½ to 3 minutes the first time on a fresh clone (2 cores: it downloads the modules and compiles FerretDB; 94 s measured), seconds after; then it prints its database URI and listens on $${ADDR:-127.0.0.1:8080}"
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
# ratios in markdown tables; against the server in MONGODB_URI (required:
# bench figures are for a real server). Flags in
# BENCH_HTTP_FLAGS, e.g. BENCH_HTTP_FLAGS='-users 16 -rounds 5 -cpuprofile cpu.pprof'
# (paths relative to this directory).
BENCH_HTTP_FLAGS ?=
.PHONY: bench-http
bench-http:
	@uri="$${MONGODB_URI:-}"; \
	if [ -z "$$uri" ]; then echo "$@: set MONGODB_URI to the server to measure" >&2; exit 2; fi; \
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
