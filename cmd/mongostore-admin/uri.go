package main

import (
	"net/url"
	"regexp"
	"strings"
)

// describeServer says which server the connection string uri names, for
// messages: "host:port" (several comma-separated, "(DNS seed list)" for
// mongodb+srv). It never returns credentials, the database or the options.
func describeServer(uri string) string {
	const unknown = "the server in MONGODB_URI"
	rest, srv := strings.CutPrefix(uri, "mongodb+srv://")
	if !srv {
		var ok bool
		if rest, ok = strings.CutPrefix(uri, "mongodb://"); !ok {
			return unknown
		}
	}
	if _, after, ok := strings.Cut(rest, "@"); ok {
		rest = after
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	hosts, err := url.QueryUnescape(rest) // a Unix socket's path is escaped
	if err != nil || hosts == "" || strings.ContainsAny(hosts, " \t\r\n@") {
		return unknown
	}
	if srv {
		hosts += " (DNS seed list)"
	}
	return hosts
}

// redact removes the connection string uri, and its password, from msg.
func redact(msg, uri string) string {
	if uri == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, uri, describeServer(uri))
	rest, ok := strings.CutPrefix(uri, "mongodb+srv://")
	if !ok {
		rest, _ = strings.CutPrefix(uri, "mongodb://")
	}
	userinfo, _, ok := strings.Cut(rest, "@")
	if !ok {
		return msg
	}
	_, password, ok := strings.Cut(userinfo, ":")
	if !ok || password == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, password, "xxxxx")
	if plain, err := url.PathUnescape(password); err == nil && plain != "" {
		msg = strings.ReplaceAll(msg, plain, "xxxxx")
	}
	return msg
}

// maskParseError returns msg, the driver's error for the connection string
// uri, which it could not parse, without any part of the URI's user name,
// password or host, which the driver quotes (`strconv.Atoi: parsing
// "S3cretPw"` for a password taken for a port): each quoted string, and
// each word of three characters or more, found in the URI before its
// options becomes "…"; if a part of four characters of it still shows,
// none of msg is shown.
func maskParseError(msg, uri string) string {
	_, authority, ok := strings.Cut(uri, "://")
	if !ok {
		authority = uri
	}
	authority, _, _ = strings.Cut(authority, "?")
	plain, err := url.PathUnescape(authority)
	if err != nil {
		plain = authority
	}
	inURI := func(s string) bool { return strings.Contains(authority, s) || strings.Contains(plain, s) }
	masked := word.ReplaceAllStringFunc(msg, func(w string) string {
		if quoted, ok := strings.CutPrefix(w, `"`); ok {
			if quoted = strings.TrimSuffix(quoted, `"`); quoted != "" && inURI(quoted) {
				return `"…"`
			}
			return w
		}
		if core := strings.TrimRight(w, ":."); len(core) >= 3 && inURI(core) {
			return "…" + w[len(core):]
		}
		return w
	})
	for _, s := range []string{authority, plain} {
		for i := 0; i+4 <= len(s); i++ {
			if strings.Contains(masked, s[i:i+4]) {
				return "the driver's reason is not shown: it quotes part of the user name, password or host"
			}
		}
	}
	return masked
}

// word matches a quoted string or a word of an error message.
var word = regexp.MustCompile(`"[^"]*"|[^\s"'=,;()]+`)
