package provider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// Token is a resolved Hugging Face token and where it came from. Source is
// safe to print; Value never is.
type Token struct {
	Value  string
	Source string
}

// String hides the value so that a stray %v cannot leak it.
func (t Token) String() string {
	if t.Value == "" {
		return "no token"
	}
	return "token from " + t.Source
}

// ResolveToken finds the token in the order huggingface_hub uses: HF_TOKEN,
// then the token file at $HF_TOKEN_PATH, else $HF_HOME/token, else
// $XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token. getenv is os.Getenv outside tests.
//
// A token with a line break or another control character inside (a token
// file of two lines, say) is an error naming where it came from: sent, it
// would make every call fail as if the endpoint were down.
func ResolveToken(getenv func(string) string) (Token, error) {
	if v := strings.TrimSpace(getenv("HF_TOKEN")); v != "" {
		return checked(Token{Value: v, Source: "HF_TOKEN"})
	}
	path := TokenPath(getenv)
	if path == "" {
		return Token{}, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Token{}, nil
	}
	if err != nil {
		return Token{}, errors.New("cannot read token file " + path + ": " + pathErr(err))
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return Token{}, nil
	}
	return checked(Token{Value: v, Source: path})
}

// checked refuses a token that cannot be sent in a header. The message
// names the source and what is wrong, never the token.
func checked(t Token) (Token, error) {
	if i := strings.IndexFunc(t.Value, unicode.IsControl); i >= 0 {
		what := "a control character"
		if c := t.Value[i]; c == '\n' || c == '\r' {
			what = "a line break"
		}
		where := "token file " + t.Source
		if t.Source == "HF_TOKEN" {
			where = "HF_TOKEN"
		}
		return Token{}, fmt.Errorf("%s has %s inside the token; it must hold the token alone, on one line", where, what)
	}
	return t, nil
}

// TokenPath is where the token file is looked for.
func TokenPath(getenv func(string) string) string {
	if p := getenv("HF_TOKEN_PATH"); p != "" {
		return p
	}
	if h := getenv("HF_HOME"); h != "" {
		return filepath.Join(h, "token")
	}
	if x := getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface", "token")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".cache", "huggingface", "token")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "huggingface", "token")
	}
	return ""
}

func pathErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// TokenFromEnv reads the token from the environment variable name
// (--token-env): it must be set, and hold one line. The messages name the
// variable, never the token.
func TokenFromEnv(getenv func(string) string, name string) (Token, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return Token{}, fmt.Errorf("%s is not set or empty (--token-env %s)", name, name)
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return Token{}, fmt.Errorf("%s has a line break or another control character inside the token; it must hold the token alone, on one line", name)
	}
	return Token{Value: v, Source: name}, nil
}
