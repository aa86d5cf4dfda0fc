// Package connstr reads a MongoDB connection string for messages: which
// server it names, and what to keep out of a message about it (its
// password; any part of its user name, password or host in the driver's
// parse errors, which quote them).
package connstr

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// split returns the parts of the connection string uri between its scheme
// and its path or options, as the driver reads them: the user info ("" for
// none) and the hosts; srv for mongodb+srv; ok false for another scheme.
func split(uri string) (userinfo, hosts string, srv, ok bool) {
	rest, srv := strings.CutPrefix(uri, "mongodb+srv://")
	if !srv {
		if rest, ok = strings.CutPrefix(uri, "mongodb://"); !ok {
			return "", "", false, false
		}
	}
	if userinfo, hosts, ok = strings.Cut(rest, "@"); !ok {
		userinfo, hosts = "", rest
	}
	if i := strings.IndexAny(hosts, "/?"); i >= 0 {
		hosts = hosts[:i]
	}
	return userinfo, hosts, srv, true
}

// Describe says which server the connection string uri names, for
// messages: "host:port" (several comma-separated, "(DNS seed list)" for
// mongodb+srv); "" if it cannot tell. It never returns credentials, the
// database or the options.
func Describe(uri string) string {
	_, hosts, srv, ok := split(uri)
	hosts, err := url.QueryUnescape(hosts) // a Unix socket's path is escaped
	switch {
	case !ok || err != nil || hosts == "" || strings.ContainsAny(hosts, " \t\r\n@"):
		return ""
	case srv:
		return hosts + " (DNS seed list)"
	}
	return hosts
}

// Redact removes the connection string uri, and its password, from msg.
func Redact(msg, uri string) string {
	if uri == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, uri, cmp.Or(Describe(uri), "the connection string"))
	userinfo, _, _, _ := split(uri)
	if _, password, _ := strings.Cut(userinfo, ":"); password != "" {
		plain, _ := url.PathUnescape(password)
		msg = strings.NewReplacer(password, "xxxxx", cmp.Or(plain, password), "xxxxx").Replace(msg)
	}
	return msg
}

// MaskParseError returns msg, the driver's error for the connection string
// uri, which it could not parse, without any part of the URI's user name,
// password or host, which the driver quotes (`strconv.Atoi: parsing
// "S3cretPw"` for a password taken for a port): each quoted string, and
// each word of three characters or more, found in the URI before its
// options becomes "…"; if a part of four characters of it still shows,
// none of msg is shown. A URI of another scheme (a missing colon, say) is
// said to be one.
func MaskParseError(msg, uri string) string {
	if !strings.HasPrefix(uri, "mongodb://") && !strings.HasPrefix(uri, "mongodb+srv://") {
		return "it does not start with mongodb:// or mongodb+srv://"
	}
	_, authority, _ := strings.Cut(uri, "://")
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

// Unreachable says in a few words why a ping of the server failed, without
// the driver's description of its topology; timeout is how long the
// driver looked for a server.
func Unreachable(err error, timeout time.Duration) string {
	msg := strings.ToLower(err.Error())
	for _, cause := range [...]struct{ in, says string }{
		{"connection refused", "the connection was refused"},
		{"no such host", "the host name is unknown"},
		{"auth", "authentication failed"},
		{"tls", "the TLS handshake failed"},
		{"certificate", "the TLS handshake failed"},
	} {
		if strings.Contains(msg, cause.in) {
			return cause.says
		}
	}
	return fmt.Sprintf("no server answered within %v", timeout)
}
