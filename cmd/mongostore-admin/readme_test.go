package main

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadme checks the README's section on the command: where it is, the
// install command, and that every command and flag it names exists.
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## Operator command\n")
	end := strings.Index(text, "\n## Sample app\n")
	if start < 0 || end < start || strings.Contains(text[start+1:end], "\n## ") {
		t.Fatal(`README.md has no "## Operator command" section right before "## Sample app"`)
	}
	section := text[start:end]
	mustContain(t, "the README's section", section,
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
		mustContain(t, "the README's section", section, "`"+cmd.name+"`", "mongostore-admin "+cmd.name)
	}
	// Every flag in the section belongs to some command.
	for _, m := range regexp.MustCompile("(?:`| )-([a-z]+)\\b").FindAllStringSubmatch(section, -1) {
		found := false
		for _, names := range flags {
			found = found || slices.Contains(names, m[1])
		}
		if !found && m[1] != "h" {
			t.Errorf("the README names the flag -%s, which no command has", m[1])
		}
	}
}
