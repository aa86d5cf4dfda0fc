package keyenv

import (
	"strings"
	"testing"
)

func TestPairs(t *testing.T) {
	k1, k2, b1 := strings.Repeat("11", 32), strings.Repeat("22", 40), strings.Repeat("33", 32)
	pairs, err := Pairs(k1+", "+k2, b1)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 4 || len(pairs[0]) != 32 || len(pairs[1]) != 32 || len(pairs[2]) != 40 || pairs[3] != nil {
		t.Fatalf("pairs %d, want 4 of lengths 32 32 40 0", len(pairs))
	}
	if pairs, err := Pairs(k1, ""); err != nil || len(pairs) != 2 || pairs[1] != nil {
		t.Fatalf("one hash key: %d pairs, %v", len(pairs), err)
	}
	for _, tc := range []struct{ hash, block, want string }{
		{k1, b1 + "," + b1, "SESSION_BLOCK_KEY: 2 keys for 1 in SESSION_KEY"},
		{k1 + ",zz" + k1[2:], "", "SESSION_KEY (key 2): not hexadecimal"},
		{"abcd", "", "SESSION_KEY: 2 bytes, want at least 32 (64 hex digits); make one with: openssl rand -hex 32"},
		{k1, "abcd", "SESSION_BLOCK_KEY: 2 bytes, want 16, 24 or 32"},
		{"", "", "SESSION_KEY: 0 bytes"},
	} {
		_, err := Pairs(tc.hash, tc.block)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Pairs(%q, %q) = %v, want %q", tc.hash, tc.block, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "abcd") || strings.Contains(err.Error(), k1[:8])) {
			t.Errorf("the error quotes a key: %v", err)
		}
	}
}
