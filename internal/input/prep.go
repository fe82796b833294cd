package input

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"golang.org/x/text/transform"
)

// prep sits between the file (or its decoder) and encoding/csv. It
//
//   - refuses bytes that are not valid UTF-8, and, after a decoder, the
//     U+FFFD the decoder puts where bytes could not be decoded, with an
//     *Error naming the line: text is never silently altered;
//   - keeps a CRLF inside a quoted field: encoding/csv turns CRLF into LF,
//     so it is passed on as CR CR LF, which encoding/csv turns into CR LF;
//   - in a file whose first line ends with a lone CR (old Mac line ends),
//     turns every lone CR outside quotes into LF, which encoding/csv reads.
//
// Whether a byte is inside quotes is the parity of the quotes before it:
// exact for every record encoding/csv accepts, and reading stops at the first
// record it does not. It works on blocks (bytes.IndexByte, bytes.Count,
// utf8.Valid), never allocating, so it costs little on the hot path.
type prep struct {
	name    string // the input, for errors
	encName string // the encoding read, for errors
	decoded bool   // the text went through a decoder: U+FFFD marks bad bytes
	inQuote bool
	mode    lineMode
	lines   int   // LFs passed on so far; the line being read is lines+1
	err     error // once set, returned for ever
}

type lineMode uint8

const (
	modeUnknown lineMode = iota // the first line end is not seen yet
	modeLF                      // LF or CRLF: lone CRs are data
	modeCR                      // lone CR ends a line
)

func (p *prep) Reset() { *p = prep{name: p.name, encName: p.encName, decoded: p.decoded} }

const replacement = "\uFFFD"

func (p *prep) Transform(dst, src []byte, atEOF bool) (nDst, nSrc int, err error) {
	if p.err != nil {
		return 0, 0, p.err
	}
	end := len(src)
	if !atEOF {
		// Hold back a character split between reads, and a last CR whose
		// LF may be in the next read.
		end = completeRunes(src)
		if end == len(src) && end > 0 && src[end-1] == '\r' {
			end--
		}
	}
	bad := p.invalidAt(src[:end])
	if bad >= 0 {
		end = bad
	}
	nDst, nSrc, err = p.pass(dst, src, end)
	p.lines += bytes.Count(dst[:nDst], []byte{'\n'})
	switch {
	case err != nil:
		return nDst, nSrc, err
	case bad >= 0:
		p.err = p.badBytes(src[bad:])
		return nDst, nSrc, p.err
	case nSrc < len(src):
		return nDst, nSrc, transform.ErrShortSrc
	}
	return nDst, nSrc, nil
}

// pass copies src[:end] to dst, handling quotes and CRs. It stops with
// transform.ErrShortDst when dst is full.
func (p *prep) pass(dst, src []byte, end int) (nDst, nSrc int, err error) {
	// Until the first line end is seen, byte by byte: it decides the mode.
	for nSrc < end && p.mode == modeUnknown {
		if nDst == len(dst) {
			return nDst, nSrc, transform.ErrShortDst
		}
		switch c := src[nSrc]; {
		case c == '"':
			p.inQuote = !p.inQuote
		case c == '\n' && !p.inQuote:
			p.mode = modeLF
		case c == '\r':
			n, ok := p.cr(dst[nDst:], src[nSrc+1:])
			if !ok {
				return nDst, nSrc, transform.ErrShortDst
			}
			nDst += n
			nSrc++
			continue
		}
		dst[nDst] = src[nSrc]
		nDst++
		nSrc++
	}
	for nSrc < end {
		seg := src[nSrc:end]
		i := bytes.IndexByte(seg, '\r')
		if i < 0 {
			i = len(seg)
		}
		k := copy(dst[nDst:], seg[:i])
		if bytes.Count(seg[:k], []byte{'"'})&1 == 1 {
			p.inQuote = !p.inQuote
		}
		nDst += k
		nSrc += k
		if k < i {
			return nDst, nSrc, transform.ErrShortDst
		}
		if i == len(seg) {
			break
		}
		n, ok := p.cr(dst[nDst:], src[nSrc+1:])
		if !ok {
			return nDst, nSrc, transform.ErrShortDst
		}
		nDst += n
		nSrc++
	}
	return nDst, nSrc, nil
}

// cr writes what a CR becomes into dst, given the bytes after it (empty only
// at the end of the input: Transform holds a last CR back until it knows).
// It reports false when dst has no room.
func (p *prep) cr(dst, after []byte) (int, bool) {
	lf := len(after) > 0 && after[0] == '\n'
	out := "\r"
	switch {
	case p.inQuote && lf:
		out = "\r\r" // then the LF: encoding/csv keeps CR LF
	case p.inQuote:
	case lf:
		if p.mode == modeUnknown {
			p.mode = modeLF
		}
	default: // a lone CR outside quotes
		if p.mode == modeUnknown {
			p.mode = modeCR
		}
		if p.mode == modeCR {
			out = "\n"
		}
	}
	if len(dst) < len(out) {
		return 0, false
	}
	return copy(dst, out), true
}

// completeRunes is len(b) less a character cut off at its end.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// invalidAt is the offset of the first byte that is not valid text, or -1.
func (p *prep) invalidAt(b []byte) int {
	if utf8.Valid(b) {
		if p.decoded {
			return bytes.Index(b, []byte(replacement))
		}
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// badBytes is the error for invalid text at the start of rest.
func (p *prep) badBytes(rest []byte) error {
	msg := fmt.Sprintf("byte 0x%02X is not valid UTF-8", rest[0])
	if p.decoded {
		msg = fmt.Sprintf("holds bytes that are not valid %s (they would have become U+FFFD)", p.encName)
	}
	if p.encName == "windows-1252" {
		msg += "; name the file's real encoding with --encoding"
	} else {
		msg += "; if the file was saved by Excel or another Windows program, try --encoding windows-1252 (or name the file's encoding with --encoding)"
	}
	return &Error{Name: p.name, Line: p.lines + 1, Msg: msg}
}
