package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
)

// Entry is a final, usable answer (success, or the fallback's): what a hit
// answers with.
type Entry struct {
	Label string
	Score float64 // NaN: the provider gave none
	// Scores are the labels the answer scored, best first (nil: none
	// kept, or an entry stored before they were).
	Scores []provider.LabelScore
	// Model is the model that answered, as the row recorded it.
	Model string
	// Fallback: a later stage of a cascade answered (--fallback-model's,
	// or a --cascade's), under its own key.
	Fallback bool
	// Usage is what the calls that got it cost, as reported: what a hit
	// saves (with the server's own cost, when it said).
	Usage provider.Usage
	// At is when it was stored.
	At time.Time
}

// Record is an entry under its key, as stores write it.
type Record struct {
	Key   Key
	Entry Entry
}

// formatVersion is the first byte of an encoded entry.
const formatVersion = 1

const (
	flagFallback = 1 << iota
	flagUsage
	flagCost
	flagNoScore
	flagScores
)

// maxScores bounds the scores an entry holds (a model's labels).
const maxScores = 1024

// maxString bounds a label or a model read back: a label is at most a few
// hundred bytes; anything longer is damage.
const maxString = 4096

// encode writes e's answer (not At, kept beside it) compactly.
func (e Entry) encode(dst []byte) []byte {
	var flags byte
	if e.Fallback {
		flags |= flagFallback
	}
	if e.Usage.Known {
		flags |= flagUsage
	}
	if e.Usage.Costed {
		flags |= flagCost
	}
	if n := len(e.Scores); n > 0 && n <= maxScores {
		flags |= flagScores
	}
	score := e.Score
	if math.IsNaN(score) {
		flags, score = flags|flagNoScore, 0
	}
	dst = append(dst, formatVersion, flags)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(score))
	dst = binary.AppendUvarint(dst, uint64(max(0, e.Usage.Prompt)))
	dst = binary.AppendUvarint(dst, uint64(max(0, e.Usage.Completion)))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(e.Usage.Cost))
	dst = binary.AppendUvarint(dst, uint64(len(e.Label)))
	dst = append(dst, e.Label...)
	dst = binary.AppendUvarint(dst, uint64(len(e.Model)))
	dst = append(dst, e.Model...)
	if flags&flagScores == 0 {
		return dst
	}
	// After the model, so that an entry without scores is encoded as
	// before them.
	dst = binary.AppendUvarint(dst, uint64(len(e.Scores)))
	for _, s := range e.Scores {
		dst = binary.AppendUvarint(dst, uint64(len(s.Label)))
		dst = append(dst, s.Label...)
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(s.Score))
	}
	return dst
}

var errEntry = errors.New("entry does not decode")

// decode reads what encode wrote; any byte out of place is an error.
func decode(b []byte) (Entry, error) {
	var e Entry
	if len(b) < 2 || b[0] != formatVersion {
		return e, errEntry
	}
	flags := b[1]
	b = b[2:]
	if flags&^(flagFallback|flagUsage|flagCost|flagNoScore|flagScores) != 0 || len(b) < 8 {
		return e, errEntry
	}
	e.Score = math.Float64frombits(binary.LittleEndian.Uint64(b))
	b = b[8:]
	p, n1 := binary.Uvarint(b)
	if n1 <= 0 || p > math.MaxInt32 {
		return e, errEntry
	}
	b = b[n1:]
	c, n2 := binary.Uvarint(b)
	if n2 <= 0 || c > math.MaxInt32 || len(b[n2:]) < 8 {
		return e, errEntry
	}
	b = b[n2:]
	e.Usage = provider.Usage{Prompt: int(p), Completion: int(c), Known: flags&flagUsage != 0,
		Cost: math.Float64frombits(binary.LittleEndian.Uint64(b)), Costed: flags&flagCost != 0}
	b = b[8:]
	var err error
	if e.Label, b, err = str(b); err != nil {
		return e, err
	}
	if e.Model, b, err = str(b); err != nil {
		return e, errEntry
	}
	if flags&flagScores != 0 {
		if e.Scores, b, err = decodeScores(b); err != nil {
			return e, err
		}
	}
	if len(b) != 0 {
		return e, errEntry
	}
	e.Fallback = flags&flagFallback != 0
	if flags&flagNoScore != 0 {
		e.Score = math.NaN()
	}
	if e.Label == "" || math.IsNaN(e.Usage.Cost) || e.Usage.Cost < 0 || math.IsNaN(e.Score) && flags&flagNoScore == 0 {
		return e, errEntry
	}
	return e, nil
}

// decodeScores reads what encode wrote of an entry's scores.
func decodeScores(b []byte) ([]provider.LabelScore, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > maxScores {
		return nil, nil, errEntry
	}
	b = b[k:]
	out := make([]provider.LabelScore, 0, n)
	for range n {
		l, rest, err := str(b)
		if err != nil || len(rest) < 8 {
			return nil, nil, errEntry
		}
		s := math.Float64frombits(binary.LittleEndian.Uint64(rest))
		out = append(out, provider.LabelScore{Label: l, Score: s})
		b = rest[8:]
	}
	return out, b, nil
}

func str(b []byte) (string, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxString || uint64(len(b)-k) < n {
		return "", nil, errEntry
	}
	return string(b[k : k+int(n)]), b[k+int(n):], nil
}

// sumLen is the bytes of an entry's checksum kept.
const sumLen = 8

// checksum covers the key, the time and the encoded answer: a byte changed
// anywhere in an entry (its key too) makes it differ.
func checksum(k Key, atMs int64, val []byte) [sumLen]byte {
	h := sha256.New()
	h.Write(k[:])
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], uint64(atMs))
	h.Write(t[:])
	h.Write(val)
	var full [sha256.Size]byte
	var out [sumLen]byte
	copy(out[:], h.Sum(full[:0]))
	return out
}

// Stored is an entry as a store keeps it: its key, time, encoded answer
// and checksum.
type Stored struct {
	Key  Key
	AtMs int64
	Val  []byte
	Sum  []byte
}

// seal makes what a store keeps of r.
func seal(r Record) Stored {
	at := r.Entry.At
	if at.IsZero() {
		at = time.Now()
	}
	s := Stored{Key: r.Key, AtMs: at.UnixMilli(), Val: r.Entry.encode(nil)}
	sum := checksum(s.Key, s.AtMs, s.Val)
	s.Sum = sum[:]
	return s
}

// open checks what a store gave back for key k: its key must be k and
// its checksum hold; anything else is damage (ok false), never an answer.
func (s Stored) open(k Key) (Entry, bool) {
	if s.Key != k || len(s.Sum) != sumLen {
		return Entry{}, false
	}
	if sum := checksum(s.Key, s.AtMs, s.Val); string(sum[:]) != string(s.Sum) {
		return Entry{}, false
	}
	e, err := decode(s.Val)
	if err != nil {
		return Entry{}, false
	}
	e.At = time.UnixMilli(s.AtMs)
	return e, true
}
