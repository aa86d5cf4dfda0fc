package mongostore

import "sync"

// memo remembers what the store made of bytes a request brought, so that
// the session's next request, bringing the same bytes, skips the work: a
// cookie value's signature check, a document's parse, MAC and decryption.
// What it holds follows from those bytes and the store's keys alone, which
// never change. It keeps two generations: once the newer holds limit bytes
// it becomes the older, and the older is dropped.
type memo[V any] struct {
	mu       sync.RWMutex
	cur, old map[string]V
	size     int // of cur, in bytes
	limit    int
}

// cookieMemoLimit and documentMemoLimit are the bytes a generation of the
// store's memos holds, counted roughly: a few thousand sessions' cookies
// or documents of a few hundred bytes. A store's memos hold at most twice
// as much, about 10 MiB. A document larger than maxRememberedDocument is not
// remembered: it would push out dozens of others.
const (
	cookieMemoLimit       = 1 << 20
	documentMemoLimit     = 4 << 20
	maxRememberedDocument = 64 << 10
)

func newMemo[V any](limit int) *memo[V] {
	return &memo[V]{cur: map[string]V{}, limit: limit}
}

// get returns what the memo holds for key.
func (m *memo[V]) get(key string) (V, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.cur[key]
	if !ok {
		v, ok = m.old[key]
	}
	return v, ok
}

// put remembers v, of about size bytes, for key.
func (m *memo[V]) put(key string, v V, size int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.size += size; m.size > m.limit {
		m.old, m.cur, m.size = m.cur, map[string]V{}, size
	}
	m.cur[key] = v
}

// openedDocument is a document a load opened, kept in the store's memo:
// its bytes, so that only the very same bytes are served from it, and
// what open made of them.
type openedDocument struct {
	raw     []byte
	d       document
	encoded []byte      // see forCodec
	values  map[any]any // from its second load, if copyable; else nil: the codec decodes encoded
}
