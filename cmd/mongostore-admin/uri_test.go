package main

import (
	"strings"
	"testing"
)

// TestMalformedURIs checks that the error for a MONGODB_URI the driver
// cannot parse shows no part of its user name, password or host: the
// driver's own messages quote them.
func TestMalformedURIs(t *testing.T) {
	const user, password, host = "alice7", "S3cretPw", "db7.qxzcorp.lan"
	for _, uri := range []string{
		"mongodb://" + user + ":" + password + "/",                                         // no @: the password taken for a port
		"mongodb://" + user + ":" + password + "@" + host + ":99999/",                      // a port out of range
		"mongodb://" + user + ":" + password + "@" + host + ":p0rt/",                       // a port that is no number
		"mongodb://" + user + ":S3c%zzretPw@" + host + "/",                                 // a bad escape in the password
		"mongodb://" + user + ":S3c/retPw@" + host + "/",                                   // a slash in the password
		"mongodb://" + user + "@" + password + "@" + host + "/",                            // an @ in the user info
		"mongodb://" + user + ":" + password + "@[::" + host + "/",                         // an unclosed IPv6 bracket
		"mongodb+srv://" + user + ":" + password + "@" + host + ":27017/",                  // a port with mongodb+srv
		"mongodb://" + user + ":" + password + "@" + host + "/?w=banana&tlsInsecure=maybe", // a bad option
		"http://" + user + ":" + password + "@" + host + "/",                               // another scheme
	} {
		t.Run(uri, func(t *testing.T) {
			r := runCmd(t, map[string]string{"MONGODB_URI": uri}, "stats")
			if r.code != 2 {
				t.Errorf("exit code %d, want 2", r.code)
			}
			mustContain(t, "stderr", r.stderr, "MONGODB_URI")
			out := r.stdout + r.stderr
			for _, secret := range []string{user, password, "zzretPw", "%zz", "retPw", host} {
				for i := 0; i+4 <= len(secret); i++ {
					if part := secret[i : i+4]; strings.Contains(out, part) {
						t.Errorf("the output shows %q, part of %q", part, secret)
					}
				}
			}
		})
	}
}

// TestUnresolvableSRV checks that a mongodb+srv URI whose servers cannot be
// looked up is a server out of reach (exit 1), not a malformed URI (2).
func TestUnresolvableSRV(t *testing.T) {
	r := runCmd(t, map[string]string{"MONGODB_URI": "mongodb+srv://sessions.example.invalid/"}, "stats")
	if r.code != 1 {
		t.Errorf("exit code %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "cannot look up the servers of sessions.example.invalid")
}
