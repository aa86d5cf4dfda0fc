package connstr

import (
	"strings"
	"testing"
)

func TestDescribeServer(t *testing.T) {
	for uri, want := range map[string]string{
		"mongodb://127.0.0.1:27499/":                               "127.0.0.1:27499",
		"mongodb://user:p%40ss@db1:27017,db2:27017/app?w=majority": "db1:27017,db2:27017",
		"mongodb+srv://u:p@cluster0.example.net/?retryWrites=true": "cluster0.example.net (DNS seed list)",
		"mongodb://%2Ftmp%2Fmongodb-27017.sock":                    "/tmp/mongodb-27017.sock",
		"postgres://x":                                             "",
	} {
		if got := Describe(uri); got != want {
			t.Errorf("Describe(%q) = %q, want %q", uri, got, want)
		}
	}
	uri := "mongodb://admin:s3cr%40t@db:27017/?authSource=admin"
	got := Redact("error parsing "+uri+": auth with s3cr@t and s3cr%40t failed", uri)
	if strings.Contains(got, "s3cr") || !strings.Contains(got, "db:27017") {
		t.Errorf("redact = %q", got)
	}
}

func TestMaskParseError(t *testing.T) {
	for _, tc := range []struct{ msg, uri, want string }{
		{`strconv.Atoi: parsing "xy": invalid syntax`, "mongodb://bo:xy/", `strconv.Atoi: parsing "…": invalid syntax`},
		{`address [::1: missing ']' in address`, "mongodb://u:p@[::1/", `address …: missing ']' in address`},
		{`unknown read preference sideways`, "mongodb://an:pw@db/?readPreference=sideways", `unknown read preference sideways`},
		{`error parsing uri: host db7.qxzcorp.lan:99999 is wrong`, "mongodb://db7.qxzcorp.lan:99999/", `error parsing uri: host … is wrong`},
		{`bad password S3cretPwXYZ`, "mongodb://u:S3cretPw@db/", "the driver's reason is not shown: it quotes part of the user name, password or host"},
		{`scheme must be "mongodb" or "mongodb+srv"`, "mongodb//u:S3cretPw@db/", "it does not start with mongodb:// or mongodb+srv://"},
		{`scheme must be "mongodb" or "mongodb+srv"`, "postgres://db/", "it does not start with mongodb:// or mongodb+srv://"},
	} {
		if got := MaskParseError(tc.msg, tc.uri); got != tc.want {
			t.Errorf("MaskParseError(%q, %q) = %q, want %q", tc.msg, tc.uri, got, tc.want)
		}
	}
}
