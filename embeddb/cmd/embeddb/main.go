// Command embeddb runs an embedded MongoDB-compatible server (FerretDB v1,
// SQLite backend) until it is interrupted (or, with -stdin, until its
// standard input closes).
//
// It prints the server's MongoDB URI as the first line on standard output,
// which is how mongostore's tests find it:
//
//	embeddb -dir /tmp/data -addr 127.0.0.1:0 -stdin
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mongostore/mongostore/embeddb"
)

func main() {
	dir := flag.String("dir", "", "directory for the SQLite files (required)")
	addr := flag.String("addr", "127.0.0.1:0", "TCP address to listen on")
	watchStdin := flag.Bool("stdin", false, "also stop when standard input reaches EOF (for a parent process that holds it open)")
	flag.Parse()

	if err := run(*dir, *addr, *watchStdin); err != nil {
		fmt.Fprintln(os.Stderr, "embeddb:", err)
		os.Exit(1)
	}
}

func run(dir, addr string, watchStdin bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := embeddb.Start(ctx, embeddb.Config{Dir: dir, Addr: addr})
	if err != nil {
		return err
	}
	fmt.Println(srv.URI())

	if watchStdin {
		// The parent holds our standard input open; EOF means it has gone.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}

	<-ctx.Done()
	return srv.Close()
}
