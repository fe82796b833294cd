package input

import (
	"io"
	"testing"
	"time"
)

// A pipe whose writer sent a few rows and then went quiet: the rows already
// sent are read at once, not after more input (or the end) arrives.
func TestQuietPipeRowsAreReadAtOnce(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("request_id,text\na,fine\nb,good\nc,great\n")) }()
	got := make(chan string, 4)
	go func() {
		rd, err := NewReader(pr, Options{Name: "stdin", IDColumn: "request_id", TextColumn: "text"})
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		for range 3 {
			r, err := rd.Next()
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- r.ID
		}
	}()
	for _, want := range []string{"a", "b", "c"} {
		select {
		case id := <-got:
			if id != want {
				t.Fatalf("got %q, want row %q", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("row %q, already in the pipe, was not read while the writer was quiet", want)
		}
	}
}
