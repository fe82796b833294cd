package paths

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestClash(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(in, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.csv")
	if err := os.Symlink(in, link); err != nil {
		t.Skip("no symlinks here:", err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	subLink := filepath.Join(dir, "sublink")
	if err := os.Symlink(sub, subLink); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{in, in, true},
		{in, "in.csv", true},          // relative and absolute
		{in, "./sub/../in.csv", true}, // not cleaned
		{link, in, true},              // a symlink to it
		{"out.csv", filepath.Join(dir, "out.csv"), true},                           // neither exists
		{filepath.Join(sub, "new.json"), filepath.Join(subLink, "new.json"), true}, // not there yet, through a linked directory
		{"out.csv", "out.csv.hfsent.json", false},
		{in, filepath.Join(sub, "in.csv"), false},
		{os.DevNull, os.DevNull, false}, // writing to it replaces nothing
	} {
		if runtime.GOOS == "windows" && tc.a == os.DevNull {
			continue
		}
		if got := Clash(tc.a, tc.b); got != tc.want {
			t.Errorf("Clash(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestWritable(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "keep.json")
	if err := os.WriteFile(existing, []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Writable(existing); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "content" {
		t.Fatalf("checking changed the file: %q", b)
	}
	fresh := filepath.Join(dir, "new.json")
	if err := Writable(fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("checking left a file behind")
	}
	if err := Writable(filepath.Join(dir, "nodir", "s.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("in a missing directory: %v", err)
	}
	if err := Writable(dir); !errors.Is(err, ErrIsDir) {
		t.Fatalf("a directory: %v", err)
	}
	if err := Replaceable(filepath.Join(dir, "nodir", "r.svg")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Replaceable in a missing directory: %v", err)
	}
	if err := Replaceable(existing); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("checks left files: %v", entries)
	}
	if runtime.GOOS != "windows" && os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		if err := Writable(filepath.Join(ro, "s.json")); !errors.Is(err, os.ErrPermission) {
			t.Fatalf("in a read-only directory: %v", err)
		}
	}
}
