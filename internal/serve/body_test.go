package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/text/encoding"
	"golang.org/x/text/transform"
)

// wholeItems is how /v1/classify was decoded before it was streamed: the
// whole body at once, then each item. decodeItems must answer as it did.
func wholeItems(body []byte, max int) (items []item, count int, found bool, field, msg string) {
	var req struct {
		Items *[]json.RawMessage `json:"items"`
	}
	if field, msg = decodeStrict(bytes.NewReader(body), &req); msg != "" {
		return nil, 0, false, field, msg
	}
	if req.Items == nil {
		return nil, 0, false, "", ""
	}
	for i, raw := range *req.Items {
		if i >= max {
			break
		}
		var it item
		it.field, it.msg = decodeStrict(bytes.NewReader(raw), &it.textRequest)
		items = append(items, it)
	}
	return items, len(*req.Items), true, "", ""
}

// FuzzDecodeItems: on any body, read whole or a byte at a time, the
// streaming decoder gives the items, the count and the errors the whole
// decode gave (for the request, and for each item in its place).
func FuzzDecodeItems(f *testing.F) {
	for _, s := range []string{
		`{"items": [{"request_id": "a", "text": "x"}, {"request_id": 7}, {"extra": 1}, null, 5, []]}`,
		`{"items": []}`, `{}`, `null`, `[]`, `"x"`, `5`, `true`, ``, `{"items": null}`,
		`{"items": {"a": 1}}`, `{"items": "s"}`, `{"items": [], "model": "x"}`, `{"model": "x", "items": []}`,
		`{"ITEMS": [{"Request_ID": "a", "TEXT": "b"}]}`, `{"items": [{}], "items": [{}, {}]}`,
		`{"items": [{}, {}, {}, {}, {}]}`, `{"items": [{"text": "a"}`, `{"items": [}`, `{"items": [{}]} x`,
		`{"items": [{}]} {}`, `{"items": [{"text": "a\u00e9\ud83d\ude00"}]}`, `{"items": [{"text": 1e400}]}`,
		" \n\t{\"items\":[{\"request_id\":\"x\",\"text\":\"y\"}]}\n ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const max = 3
		w, wn, wfound, wfield, wmsg := wholeItems(body, max)
		for name, r := range map[string]io.Reader{"whole": bytes.NewReader(body), "one byte": iotest.OneByteReader(bytes.NewReader(body))} {
			got, n, found, field, msg := decodeItems(r, max)
			if wmsg != "" || msg != "" {
				if field != wfield || msg != wmsg {
					t.Fatalf("%s: error %q %q, whole decode %q %q (%q)", name, field, msg, wfield, wmsg, body)
				}
				continue
			}
			if found != wfound || n != wn || fmt.Sprint(got) != fmt.Sprint(w) {
				t.Fatalf("%s: found %v, %d items %v; whole decode found %v, %d items %v (%q)", name, found, n, got, wfound, wn, w, body)
			}
		}
	})
}

// The body reader refuses bytes that are not UTF-8, wherever they fall
// between reads, and passes every valid character whole.
func TestBodyUTF8(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"plain", true}, {"é€😀", true}, {strings.Repeat("€", 1000), true},
		{"caf\xe9", false}, {"\xe2\x82", false}, {"a\xffb", false}, {"\xed\xa0\x80", false},
	} {
		for name, wrap := range map[string]func(io.Reader) io.Reader{"whole": func(r io.Reader) io.Reader { return r }, "one byte": iotest.OneByteReader, "half": iotest.HalfReader} {
			b := &body{}
			b.r = transform.NewReader(reading{wrap(strings.NewReader(c.in)), &b.err}, encoding.UTF8Validator)
			var out bytes.Buffer
			buf := make([]byte, 512)
			var err error
			for {
				var n int
				n, err = b.Read(buf)
				out.Write(buf[:n])
				if err != nil {
					break
				}
			}
			if c.ok && (err != io.EOF || out.String() != c.in) {
				t.Errorf("%s %q: read %q, %v", name, c.in, out.String(), err)
			}
			if !c.ok && err != errNotUTF8 {
				t.Errorf("%s %q: %v, want errNotUTF8", name, c.in, err)
			}
		}
	}
}
