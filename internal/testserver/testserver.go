// Package testserver runs the embedded FerretDB server of the nested module
// embeddb (embeddb/cmd/embeddb) in a child process, for the tests of
// mongostore's modules: the library, the sample app, the gin adapter.
//
// It starts a process rather than importing embeddb so that the library's
// go.mod never requires FerretDB; it only needs the go command.
package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// buildTimeout bounds the build of the server; the first one compiles
// FerretDB and takes minutes on a small machine.
const buildTimeout = 10 * time.Minute

// Build builds the embedded server's command into dir and returns the
// path of the executable.
func Build(dir string) (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testserver: cannot locate its own source")
	}
	moduleDir := filepath.Join(filepath.Dir(self), "..", "..", "embeddb")
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("testserver: the go command is needed to build the embedded server: %w", err)
	}
	bin := filepath.Join(dir, "embeddb")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/embeddb")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testserver: go build ./cmd/embeddb in %s: %w\n%s", moduleDir, err, out)
	}
	return bin, nil
}

// Process is an embedded server running in a child process.
type Process struct {
	// URI is the server's MongoDB connection string.
	URI   string
	stdin io.Closer
	done  chan struct{} // closed once the process has exited
	err   error         // how it exited, set before done is closed
	kill  func() error
}

// Start runs the server executable bin (see Build) with its files in
// dataDir, on a free loopback port, and returns once the server accepts
// connections. Its own logs go to standard error.
func Start(bin, dataDir string) (*Process, error) {
	cmd := exec.Command(bin, "-dir", dataDir, "-addr", "127.0.0.1:0", "-stdin")
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 10 * time.Second // Wait returns even if the output pipes stay open
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testserver: start %s: %w", bin, err)
	}
	p := &Process{stdin: stdin, done: make(chan struct{}), kill: cmd.Process.Kill}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.URI = <-lines:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("testserver: the embedded server exited before it printed its URI: %v", p.err)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-p.done
		return nil, errors.New("testserver: the embedded server did not print its URI within a minute")
	}
}

// Kill kills the server at once (SIGKILL), as a crash would, and waits
// for the process to exit. Its files stay, for a new Start on the same
// directory.
func (p *Process) Kill() {
	_ = p.kill()
	<-p.done
}

// Stop stops the server (it stops when its standard input closes) and
// waits for it, killing it if it has not stopped within 30 seconds.
func (p *Process) Stop() error {
	p.stdin.Close()
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		_ = p.kill()
		<-p.done
		return errors.New("testserver: the embedded server did not stop within 30s; killed")
	}
}

// Run starts a server with its executable and data in a new temporary
// directory, for a test binary's TestMain. stop stops it and removes the
// directory.
func Run() (uri string, stop func() error, err error) {
	sweep()
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	bin, err := Build(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	p, err := Start(bin, filepath.Join(dir, "data"))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return p.URI, func() error {
		defer os.RemoveAll(dir)
		return p.Stop()
	}, nil
}

// Run's directories are named after dirPattern, and hold ownerFile: the
// process ID of the test binary that made it.
const dirPattern, ownerFile = "mongostore-testserver-*", "owner.pid"

// sweep removes the directories Run made for test binaries that have
// exited without stopping their server (killed, interrupted, timed out).
// A directory without its owner file yet is left alone.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if pid, perr := strconv.Atoi(string(b)); err == nil && perr == nil && !running(pid) {
			os.RemoveAll(dir)
		}
	}
}

// running reports whether the process pid may still be running.
func running(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	defer p.Release()
	return !errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// Main runs a test binary's tests, m, for its TestMain: against the server
// in MONGODB_URI or, when it is unset, against a server it starts with Run
// (MONGODB_URI set for the tests) and stops after them. name begins its
// messages. It exits with the tests' code.
func Main(m *testing.M, name string) {
	if os.Getenv("MONGODB_URI") != "" {
		os.Exit(m.Run())
	}
	uri, stop, err := Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+": start embedded server:", err)
		os.Exit(1)
	}
	os.Setenv("MONGODB_URI", uri)
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, name+": stop embedded server:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
