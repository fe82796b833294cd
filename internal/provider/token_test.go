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
