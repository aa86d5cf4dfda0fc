package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadme checks that the README links the command's page, which
// TestOperatorDoc checks.
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "README.md", string(readme), "(docs/operator.md)", "`mongostore-admin`")
}

// TestOperatorDoc checks docs/operator.md: the install command, the
// settings, every command and only flags there are, and that each command line in it runs a command there is, with its flags.
func TestOperatorDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	mustContain(t, "docs/operator.md", text, "go install github.com/mongostore/mongostore/cmd/mongostore-admin@latest", "mongostore-admin -version",
		"MONGODB_URI", "DB_NAME", "SESSION_COLLECTION", "SESSION_KEY", "SESSION_BLOCK_KEY", "Exit codes: 0 done, 1 failure")
	checkNames(t, "docs/operator.md", text)
	for _, m := range regexp.MustCompile(`(?m)^\$ (?:\S+=\S+ )*mongostore-admin (\S+)(.*)$`).FindAllStringSubmatch(text, -1) {
		i := slices.IndexFunc(commands, func(c command) bool { return c.name == m[1] })
		if m[1] == "-version" {
			continue
		}
		if i < 0 {
			t.Errorf("docs/operator.md runs %q: no such command", m[0])
			continue
		}
		fs := flag.NewFlagSet(m[1], flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("db", "", "")
		fs.String("collection", "", "")
		fs.Duration("timeout", 0, "")
		commands[i].flags(fs)
		if err := fs.Parse(strings.Fields(m[2])); err != nil {
			t.Errorf("docs/operator.md runs %q: %v", m[0], err)
		}
	}
}

// checkNames checks that text, about the command, names every command and
// only flags that some command has (or -h, -version).
func checkNames(t *testing.T, what, text string) {
	t.Helper()
	flags := map[string][]string{}
	for _, cmd := range commands {
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		fs.String("db", "", "")
		fs.String("collection", "", "")
		fs.Duration("timeout", 0, "")
		cmd.flags(fs)
		fs.VisitAll(func(f *flag.Flag) { flags[cmd.name] = append(flags[cmd.name], f.Name) })
		mustContain(t, what, text, "`"+cmd.name+"`", "mongostore-admin "+cmd.name)
	}
	for _, m := range regexp.MustCompile("(?:`| )-([a-z]+(?:-[a-z]+)*)\\b").FindAllStringSubmatch(text, -1) {
		found := m[1] == "h" || m[1] == "version"
		for _, names := range flags {
			found = found || slices.Contains(names, m[1])
		}
		if !found {
			t.Errorf("%s names the flag -%s, which no command has", what, m[1])
		}
	}
}
