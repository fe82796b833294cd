package input

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/htmlindex"
	"golang.org/x/text/encoding/ianaindex"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
)

// Encoding is a character encoding an input may be read in.
type Encoding struct {
	Name string            // canonical, lower case: "utf-8", "windows-1252", "utf-16le"
	enc  encoding.Encoding // nil for UTF-8, which is read as it is
}

// utf8Enc is the default: no decoding, only validation.
var utf8Enc = Encoding{Name: "utf-8"}

// LookupEncoding resolves an encoding name (a WHATWG label such as
// windows-1252, latin1, utf-16, or an IANA name such as ISO-8859-15) through
// golang.org/x/text. "" is UTF-8.
func LookupEncoding(name string) (Encoding, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return utf8Enc, nil
	}
	// WHATWG labels first: they are what browsers and most tools mean by a
	// name (latin1 is windows-1252, utf-16 is little-endian).
	enc, err := htmlindex.Get(name)
	if err != nil {
		enc, err = ianaindex.IANA.Encoding(name)
	}
	if err != nil || enc == nil || enc == encoding.Replacement {
		return Encoding{}, fmt.Errorf("--encoding %q: unknown or unsupported encoding; try utf-8, utf-16 (utf-16le, utf-16be), windows-1252 (also latin1), iso-8859-15, shift_jis, gbk (WHATWG and IANA names are accepted)", name)
	}
	if enc == unicode.UTF8 || enc == unicode.UTF8BOM {
		return utf8Enc, nil
	}
	canon, err := htmlindex.Name(enc)
	if err != nil {
		if canon, err = ianaindex.IANA.Name(enc); err != nil {
			canon = name
		}
	}
	return Encoding{Name: strings.ToLower(canon), enc: enc}, nil
}

// utf16LE and utf16BE decode a file that starts with the matching BOM (the
// BOM is stripped by the decoder).
var (
	utf16LE = unicode.UTF16(unicode.LittleEndian, unicode.ExpectBOM)
	utf16BE = unicode.UTF16(unicode.BigEndian, unicode.ExpectBOM)
)

// openEncoded looks at the first bytes of r for a byte-order mark and says
// how to read the rest: a BOM wins over the named encoding (a file that says
// what it is is believed). dec is nil for UTF-8, which is read as it is, so
// the common case costs nothing here; otherwise it decodes to UTF-8 (and
// strips a UTF-16 BOM). used names what is read; bom says a BOM chose it.
func openEncoded(r io.Reader, e Encoding) (src io.Reader, dec transform.Transformer, used string, bom bool, err error) {
	head := make([]byte, 3)
	n, err := io.ReadFull(r, head)
	switch err {
	case nil, io.EOF, io.ErrUnexpectedEOF:
	default:
		return nil, nil, "", false, err
	}
	head = head[:n]
	src = io.MultiReader(bytes.NewReader(head), r)
	switch {
	case bytes.HasPrefix(head, []byte("\xEF\xBB\xBF")):
		return io.MultiReader(bytes.NewReader(head[3:]), r), nil, "utf-8", true, nil
	case bytes.HasPrefix(head, []byte("\xFF\xFE")):
		return src, utf16LE.NewDecoder(), "utf-16le", true, nil
	case bytes.HasPrefix(head, []byte("\xFE\xFF")):
		return src, utf16BE.NewDecoder(), "utf-16be", true, nil
	case e.enc == nil:
		return src, nil, e.Name, false, nil
	}
	return src, e.enc.NewDecoder(), e.Name, false, nil
}
