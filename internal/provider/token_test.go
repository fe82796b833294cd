package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveTokenOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(p, v string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	explicit := write(filepath.Join(dir, "explicit"), "hf_path\n")
	write(filepath.Join(dir, "hfhome", "token"), "hf_home")
	write(filepath.Join(dir, "home", ".cache", "huggingface", "token"), " hf_cache ")

	cases := []struct {
		name       string
		env        map[string]string
		want, from string
	}{
		{"env wins", map[string]string{"HF_TOKEN": "hf_env", "HF_TOKEN_PATH": explicit}, "hf_env", "HF_TOKEN"},
		{"token path", map[string]string{"HF_TOKEN_PATH": explicit, "HF_HOME": filepath.Join(dir, "hfhome")}, "hf_path", explicit},
		{"hf home", map[string]string{"HF_HOME": filepath.Join(dir, "hfhome"), "HOME": filepath.Join(dir, "home")}, "hf_home", filepath.Join(dir, "hfhome", "token")},
		{"default cache", map[string]string{"HOME": filepath.Join(dir, "home")}, "hf_cache", filepath.Join(dir, "home", ".cache", "huggingface", "token")},
		{"none", map[string]string{"HOME": filepath.Join(dir, "nohome")}, "", ""},
		{"blank env falls through", map[string]string{"HF_TOKEN": "  ", "HF_TOKEN_PATH": explicit}, "hf_path", explicit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := ResolveToken(func(k string) string { return c.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if tok.Value != c.want || tok.Source != c.from {
				t.Fatalf("got %q from %q, want %q from %q", tok.Value, tok.Source, c.want, c.from)
			}
			if shown := fmt.Sprint(tok); c.want != "" && strings.Contains(shown, c.want) {
				t.Fatalf("printing a Token leaks its value: %s", shown)
			}
		})
	}
}

// A token with a line break or another control character inside is refused
// when read, naming where it came from and never the token: sent, it made
// every call fail as "connection failed".
func TestResolveTokenRefusesControlCharacters(t *testing.T) {
	dir := t.TempDir()
	twoLines := filepath.Join(dir, "token")
	if err := os.WriteFile(twoLines, []byte("hf_FIRSTLINE123\nhf_SECONDLINE456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"two-line file":     {map[string]string{"HF_TOKEN_PATH": twoLines}, "token file " + twoLines + " has a line break"},
		"newline in env":    {map[string]string{"HF_TOKEN": " hf_FIRSTLINE123\r\nhf_SECONDLINE456 "}, "HF_TOKEN has a line break"},
		"control character": {map[string]string{"HF_TOKEN": "hf_FIRSTLINE123\x00"}, "HF_TOKEN has a control character"},
		"tab inside":        {map[string]string{"HF_TOKEN": "hf_FIRSTLINE123\thf_SECONDLINE456"}, "HF_TOKEN has a control character"},
	} {
		tok, err := ResolveToken(func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", name, err, c.want)
			continue
		}
		if tok.Value != "" || strings.Contains(err.Error(), "LINE") {
			t.Errorf("%s: the token leaks: %q, %q", name, tok.Value, err)
		}
	}
	// Ends are still trimmed: a token file with a final newline is fine.
	if tok, err := ResolveToken(func(k string) string { return map[string]string{"HF_TOKEN": "\thf_ok\r\n"}[k] }); err != nil || tok.Value != "hf_ok" {
		t.Fatalf("trimmed token: %q, %v", tok.Value, err)
	}
}
