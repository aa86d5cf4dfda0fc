package main

import (
	"fmt"
	"io"
	"time"
)

// step shows on w that a step called label is under way once it has run
// for after, and again every after, until the returned function is called.
// That function waits until nothing more is written, so w needs no lock.
func step(w io.Writer, after time.Duration, command, label string) (done func()) {
	start := time.Now()
	stop := make(chan struct{})
	finished := make(chan bool)
	go func() {
		shown := false
		t := time.NewTicker(after)
		defer t.Stop()
		for {
			select {
			case <-stop:
				finished <- shown
				return
			case <-t.C:
				shown = true
				fmt.Fprintf(w, "mongostore-admin %s: %s… %s\n", command, label, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		close(stop)
		if <-finished {
			fmt.Fprintf(w, "mongostore-admin %s: %s: done in %s\n", command, label, time.Since(start).Round(100*time.Millisecond))
		}
	}
}
