// Command loadbench answers one question about mongostore: how close is an
// HTTP request through the store to a request that sends the same database
// commands with the bare driver?
//
// It starts an http.Server on a loopback port, in process, with three
// handler variants, each in a read-write (rw) and a read-only (ro) mode:
//
//   - floor: the bare driver. It reads the cookie and finds the document by
//     _id (FindOne(ctx, {_id}).Raw()); in rw mode it also updates it with
//     FindOneAndUpdate({_id}, {$set: …}, ReturnDocument Before) and sets the
//     cookie again. Its documents and its $set are shaped like the store's:
//     the tool records, with a command monitor on a separate client, the
//     commands one store session sends (insert, find, findAndModify) and
//     copies the fields, types and sizes of the $set it sends; and it copies
//     the documents the store wrote (fields, types, binary sizes) for the
//     floor's own documents. So the floor stays right when the format
//     changes, and the tool warns when the store's commands no longer are
//     the floor's.
//   - store: store.Get, and in rw mode a change to a counter and
//     session.Save.
//   - middleware: store.Middleware(name, mongostore.MiddlewareOptions{})
//     around a handler that reads the session (ro) or changes the counter
//     (rw).
//
// -users concurrent clients, each with its own cookie jar and session per
// variant (created through the store, or inserted for the floor) loop
// requests over HTTP keep-alive. For each mode the variants run in
// interleaved rounds, the order rotated every round, because the machine is
// shared and noisy. The tool prints a line per round and, at the end, a
// markdown table: per mode and variant the requests, req/s, p50 and p99
// latency (client side, in milliseconds), and the ratio of the variant's
// req/s to the floor's in the same mode (the key number; goals: store at
// least 0.95, middleware at least 0.93), over all rounds, then the median
// and range of the rounds' own ratios (on a busy machine, trust the median
// of many short rounds: -rounds 9 -round 2s).
//
// Usage:
//
//	MONGODB_URI=mongodb://127.0.0.1:27017/ go run ./cmd/loadbench [flags]
//	MONGODB_URI=$(../shared/docdb/docdb.sh start | tail -1) go run ./cmd/loadbench
//	make bench-http BENCH_HTTP_FLAGS='-users 16 -rounds 5'
//
// make bench-http uses MONGODB_URI, or when it is empty the FerretDB v2 +
// DocumentDB server that ../shared/docdb/docdb.sh starts. The flags:
//
//	-uri         MongoDB URI (default $MONGODB_URI)
//	-users       concurrent users (default 8)
//	-rounds      interleaved rounds per mode (default 3)
//	-round       length of one variant's turn in a round (default 3s)
//	-warmup      unmeasured requests per variant before a mode's rounds (default 1s)
//	-modes       modes, comma-separated: rw, ro (default rw,ro)
//	-variants    variants, comma-separated: floor, store, middleware (default all three)
//	-encrypt     give the store a block key too (AES-encrypted cookies)
//	-db          database (default mongostore_loadbench)
//	-timeout     total time budget; the run stops when it is spent (default 5m)
//	-cpuprofile  write a CPU profile of the whole run to this file
//
// Find the store's hot spots in a profile with, for example:
//
//	go tool pprof -top -cum -show '^github.com/mongostore/mongostore\.' cpu.pprof
//
// The benchmark's collection (a fresh one per run, in -db) is dropped at the
// end. The exit status is 0 when every request succeeded, 1 when a request
// or the run failed (the table is printed all the same), 2 on bad flags or
// no server.
//
// The measuring code is the internal package internal/loadbench, which
// cmd/loadbench/peers (a module of its own, so that this one's go.mod
// keeps only mongo-driver v2 and gorilla's packages) runs with other
// MongoDB session stores as further variants: make bench-http runs that.
//
// The tool uses only mongostore's public API and the driver.
package main

import "github.com/mongostore/mongostore/internal/loadbench"

func main() { loadbench.Main() }
