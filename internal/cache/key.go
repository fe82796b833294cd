// Package cache is the response cache across runs: a row's final, usable
// answer kept under the key of the request that got it, so that the same
// request is never paid for twice. The key is a hash of the request
// exactly as a client would send it for that row alone (Keyer, from the
// client's provider.Requester), so it follows every field the body gains
// and holds no credential.
//
// A Store keeps the entries: one SQLite file on one machine (File), or the
// fleet's PostgreSQL (PG). Cache sits in front of either: lookups in
// batches, writes queued and committed in batches, and a store that fails
// or is found damaged switched off for the run with a warning, never a
// wrong answer. It knows nothing of rows, flags or HTTP: the engine looks
// rows up before admission and stores what succeeded; a Batch API path
// can do the same with Lookup and Put by key.
package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"

	"github.com/hfsent/hfsent/internal/provider"
)

// Key is a request's key: SHA-256 of the provider kind, the model, the URL
// and the body, each length-prefixed.
type Key [32]byte

// keyVersion starts every key: a change to what goes into a key changes
// it, so an entry made under the old rule is never read under the new.
const keyVersion = "hfsent-cache-key/1"

// KeyOf is the key of a request: kind is the provider kind (--provider),
// model the model the client asks (also where neither the URL nor the body
// names it: a fixed --endpoint), url the URL without credentials (as
// provider.Requester gives it: no userinfo, no query values), body the
// bytes sent.
func KeyOf(kind, model, url string, body []byte) Key {
	h := sha256.New()
	field(h, []byte(keyVersion))
	field(h, []byte(kind))
	field(h, []byte(model))
	field(h, []byte(url))
	field(h, body)
	var k Key
	h.Sum(k[:0])
	return k
}

func field(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// Keyer makes the key of a row's request for one client.
type Keyer struct {
	kind, model string
	req         provider.Requester
}

// NewKeyer is the keyer of client c of kind; ok is false when c cannot
// show its request (the embedded model, which costs nothing to ask again:
// it is not cached).
func NewKeyer(kind string, c provider.Classifier) (k Keyer, ok bool) {
	r, ok := c.(provider.Requester)
	if !ok {
		return Keyer{}, false
	}
	return Keyer{kind: kind, model: c.Model(), req: r}, true
}

// Key is the key of the request c would send now for text alone; ok is
// false when it cannot be made (a text the body cannot encode: such a row
// is not cached).
func (k Keyer) Key(text string) (Key, bool) {
	url, body, err := k.req.Request(text)
	if err != nil {
		return Key{}, false
	}
	return KeyOf(k.kind, k.model, url, body), true
}
