// Package keyenv reads a store's key pairs as the sample app and
// mongostore-admin take them from the environment: SESSION_KEY, hex hash
// keys, and SESSION_BLOCK_KEY, hex block keys, each list comma-separated,
// the current key first (a rotation lists the older ones after it).
package keyenv

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// MinHashKey is the fewest bytes a hash key may have.
const MinHashKey = 32

// Pairs returns the key pairs of hashKeys and blockKeys, for
// mongostore.NewStore: each hash key with its block key, nil where there
// is none. Its errors name the setting and the key, never its value.
func Pairs(hashKeys, blockKeys string) ([][]byte, error) {
	hashes, blocks := strings.Split(hashKeys, ","), strings.Split(blockKeys, ",")
	if strings.TrimSpace(blockKeys) == "" {
		blocks = nil
	}
	if len(blocks) > len(hashes) {
		return nil, fmt.Errorf("SESSION_BLOCK_KEY: %d keys for %d in SESSION_KEY", len(blocks), len(hashes))
	}
	var pairs [][]byte
	for i, h := range hashes {
		which := map[bool]string{true: fmt.Sprintf(" (key %d)", i+1)}[len(hashes) > 1]
		key, err := hexKey("SESSION_KEY"+which, h, MinHashKey)
		var block []byte
		if err == nil && i < len(blocks) {
			block, err = hexKey("SESSION_BLOCK_KEY"+which, blocks[i], 16, 24, 32)
		}
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, key, block)
	}
	return pairs, nil
}

// hexKey decodes s, the key name: a hash key of at least sizes[0] bytes,
// or a block key of one of sizes (nil if blank).
func hexKey(name, s string, sizes ...int) ([]byte, error) {
	key, err := hex.DecodeString(strings.TrimSpace(s))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: not hexadecimal (it must hold an even number of the digits 0-9 and a-f)", name) // err would quote the key
	case len(sizes) == 1 && len(key) < sizes[0]:
		return nil, fmt.Errorf("%s: %d bytes, want at least %d (%d hex digits); make one with: openssl rand -hex %d",
			name, len(key), sizes[0], 2*sizes[0], sizes[0])
	case len(sizes) > 1 && len(key) > 0 && !slices.Contains(sizes, len(key)):
		return nil, fmt.Errorf("%s: %d bytes, want 16, 24 or 32", name, len(key))
	case len(key) == 0:
		return nil, nil
	}
	return key, nil
}
