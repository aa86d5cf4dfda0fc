package main

import (
	"net/url"
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
