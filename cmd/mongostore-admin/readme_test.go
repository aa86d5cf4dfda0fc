package main

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadme checks the command's page, docs/operator.md: that the README
// links to it, the install command, and that every command and flag it
// names exists.
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(docs/operator.md)") {
		t.Error("README.md does not link to docs/operator.md")
	}
	page, err := os.ReadFile("../../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	if !strings.HasPrefix(section, "# Operator command\n") {
		t.Error(`docs/operator.md does not open with "# Operator command"`)
	}
	mustContain(t, "docs/operator.md", section,
		"go install github.com/mongostore/mongostore/cmd/mongostore-admin@latest",
		"MONGODB_URI", "DB_NAME", "SESSION_COLLECTION", "SESSION_KEY", "SESSION_BLOCK_KEY")

	flags := map[string][]string{}
	for _, cmd := range commands {
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		fs.String("db", "", "")
		fs.String("collection", "", "")
		fs.Duration("timeout", 0, "")
		cmd.flags(fs)
		fs.VisitAll(func(f *flag.Flag) { flags[cmd.name] = append(flags[cmd.name], f.Name) })
		mustContain(t, "docs/operator.md", section, "`"+cmd.name+"`", "mongostore-admin "+cmd.name)
	}
	// Every flag in the section belongs to some command.
	for _, m := range regexp.MustCompile("(?:`| )-([a-z]+)\\b").FindAllStringSubmatch(section, -1) {
		found := false
		for _, names := range flags {
			found = found || slices.Contains(names, m[1])
		}
		if !found && m[1] != "h" {
			t.Errorf("docs/operator.md names the flag -%s, which no command has", m[1])
		}
	}
}
