package db

import (
	"context"
	"strings"
	"testing"
)

// TestConnectHidesCredentials checks that a connection string the driver
// cannot parse gives an error without its password: the driver's error
// quotes it where it takes it for a port.
func TestConnectHidesCredentials(t *testing.T) {
	_, _, _, err := Connect(context.Background(), "mongodb://bench:S3cretPw/", nil)
	if err == nil || strings.Contains(err.Error(), "S3cretPw") {
		t.Fatalf("Connect = %v, want an error without the password", err)
	}
}
