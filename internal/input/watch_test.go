package input

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Watch passes a file through while its size stays what it was, and fails
// with an *Error as soon as it is not (checked before every read), or the
// file ends early: nothing read after the change is passed on.
func TestWatchNoticesAChange(t *testing.T) {
	data := strings.Repeat("0123456789", 1000)
	for _, c := range []struct {
		name, want string
		change     func(path string) error
	}{
		{"truncated", "was truncated while it was read (10000 bytes when the run began, 4000 now): the input changed", func(path string) error {
			return os.Truncate(path, 4000)
		}},
		{"grown", "grew while it was read (10000 bytes when the run began, 10003 now)", func(path string) error {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString("abc")
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.csv")
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w := Watch(f, int64(len(data)), "in.csv")
			buf := make([]byte, 1000)
			if n, err := io.ReadFull(w, buf); n != 1000 || err != nil {
				t.Fatalf("read %d, %v before the change", n, err)
			}
			if err := c.change(path); err != nil {
				t.Fatal(err)
			}
			n, err := w.Read(buf)
			var ie *Error
			if n != 0 || !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("after the change: %d bytes, %v; want none and %q", n, err, c.want)
			}
			if _, again := w.Read(buf); again != err {
				t.Fatalf("then %v, want the same error", again)
			}
		})
	}
	// Unchanged, it reads to the end as the file does.
	path := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	if b, err := io.ReadAll(Watch(f, int64(len(data)), "in.csv")); err != nil || string(b) != data {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
}

// Read through a Reader, the change names the line reading stopped at.
func TestChangeNamesTheLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range 20000 {
		b.WriteString("id" + strings.Repeat("x", i%5) + ",fine text\n")
	}
	path := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	rd, err := NewReader(Watch(f, int64(b.Len()), "in.csv"), std)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(b.Len()/2)); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for {
		_, err = rd.Next()
		if err != nil {
			break
		}
		rows++
	}
	var ie *Error
	if !errors.As(err, &ie) || ie.Line != rows+2 || !strings.Contains(err.Error(), "was truncated") || rows >= 20000 {
		t.Fatalf("after %d rows: %v; want the line after them", rows, err)
	}
}
