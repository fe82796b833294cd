package redact

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://router.huggingface.co/hf-inference/models/{model}": "https://router.huggingface.co/hf-inference/models/{model}",
		"http://user:PW@127.0.0.1:8080/m?api_key=Q":                 "http://REDACTED@127.0.0.1:8080/m?api_key=REDACTED",
		"http://user@h/m":            "http://REDACTED@h/m",
		"http://h/m?a=1&b=&c&&d=x=y": "http://h/m?a=REDACTED&b=REDACTED&REDACTED&&d=REDACTED",
		"http://h/m?SECRET":          "http://h/m?REDACTED",
		"http://h/m#access_token=T":  "http://h/m#REDACTED",
		"http://h/m?k=v#frag":        "http://h/m?k=REDACTED#REDACTED",
		"http://h/a@b":               "http://h/a@b",
		"http://u:p@w@h/x":           "http://REDACTED@h/x",
		"//u:p@h/x":                  "//REDACTED@h/x",
		"HTTP://U:P@H":               "HTTP://REDACTED@H",
		"http://[::1]:80/x?t=1":      "http://[::1]:80/x?t=REDACTED",
		"":                           "",
		"http://":                    "http://",
		"http://u:p@h?":              "http://REDACTED@h?",
		"not a url":                  "not a url",
		"user:PW@host/x":             "REDACTED@host/x",
		// Malformed: everything up to the last @ goes.
		"http://user:PW@127.0.0.1:1 /m?api_key=Q": "http://REDACTED@127.0.0.1:1 /m?api_key=REDACTED",
		"http://user:pa/ss@h/x":                   "http://REDACTED@h/x",
		"http://user:pa?ss@h/x?k=v":               "http://REDACTED@h/x?k=REDACTED",
		"http://user:pa#ss@h/x":                   "http://REDACTED@h/x",
		"http://[::1:bad/x?key=K":                 "http://[::1:bad/x?key=REDACTED",
		"http://u:p%zz@h/x":                       "http://REDACTED@h/x",
		"ftp://u:p@h/x?q=1":                       "ftp://REDACTED@h/x?q=REDACTED",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzURL: whatever the string, the password and the query values that
// net/url would send are not in what is shown.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"http://user:PWSECRET@h:1/m?api_key=QSECRET", "http://u:p/w@h?x=y", "//a@b?c#d", "http://h/x?a=1&b=2#f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := URL(s)
		u, err := url.Parse(s)
		if err != nil {
			// Unparseable: nothing before the last @ survives.
			if i := strings.LastIndexByte(s, '@'); i >= 0 && strings.Count(got, "@") > strings.Count(s[i:], "@") {
				t.Fatalf("URL(%q) = %q keeps an @ before the last one", s, got)
			}
			return
		}
		secret := func(v string) bool {
			// Short values may occur elsewhere by chance.
			return len(v) >= 4 && !strings.Contains(strings.Replace(s, v, "", 1), v)
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok && secret(p) && strings.Contains(got, p) {
				t.Fatalf("URL(%q) = %q shows the password", s, got)
			}
		}
		if u.RawQuery != "" && !strings.Contains(u.RawQuery, "#") {
			for _, item := range strings.Split(u.RawQuery, "&") {
				if _, v, ok := strings.Cut(item, "="); ok && secret(v) && strings.Contains(got, v) {
					t.Fatalf("URL(%q) = %q shows the query value %q", s, got, v)
				}
			}
		}
	})
}

func TestTextRedactsMaskedKeys(t *testing.T) {
	in := "Incorrect API key provided: sk-proj-abcd************************************wxyz. You can find your API key at https://platform.openai.com/account/api-keys."
	got := Text(in)
	if strings.Contains(got, "abcd") || strings.Contains(got, "wxyz") || !strings.Contains(got, "Incorrect API key provided: "+Mark) {
		t.Fatalf("%q", got)
	}
}

// A key a server echoes back encoded reached the error column and stderr:
// only the exact string was redacted. Every common encoding goes now, alone
// or inside a longer text (a base64 "Bearer KEY" header, at each alignment).
func TestTextRedactsTheSecretsEncodings(t *testing.T) {
	const key = "local+key/with=odd:chars-ünï-0123456789"
	b64 := func(s string) []string {
		return []string{base64.StdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s))}
	}
	shown := map[string]string{
		"exact":       key,
		"upper":       strings.ToUpper(key),
		"lower":       strings.ToLower(key),
		"query":       url.QueryEscape(key),
		"query lower": strings.ToLower(url.QueryEscape(key)),
		"path":        url.PathEscape(key),
		"hex":         hex.EncodeToString([]byte(key)),
		"HEX":         strings.ToUpper(hex.EncodeToString([]byte(key))),
	}
	// kept is what may stay of each: the encoding of what came before
	// the key, a character that mixes its bits with the key's, padding.
	kept := map[string]int{}
	for _, prefix := range []string{"", "Bearer ", "user:", "x"} {
		for j, e := range b64(prefix + key) {
			name := fmt.Sprintf("base64 of %q, %d", prefix, j)
			shown[name], kept[name] = e, len(base64.RawStdEncoding.EncodeToString([]byte(prefix)))+3
		}
	}
	const before, after = "invalid key: ", " (see the docs)"
	for name, enc := range shown {
		got := Text(before+enc+after, key)
		if !strings.HasPrefix(got, before) || !strings.HasSuffix(got, after) || strings.Count(got, Mark) != 1 {
			t.Errorf("%s: %q", name, got)
			continue
		}
		if left := len(got) - len(before) - len(after) - len(Mark); left > kept[name] {
			t.Errorf("%s: %q keeps %d characters of %q, want at most %d", name, got, left, enc, kept[name])
		}
	}
	// Short secrets are matched as they are, not by their encodings: a few
	// characters of base64 are found in ordinary text.
	if got := Text("ab3d yWIz", "ab3d"); got != Mark+" yWIz" {
		t.Errorf("short secret: %q", got)
	}
	if got := Text("\xff\xfeKEY-0123456789 rest", "key-0123456789"); got != "\xff\xfe"+Mark+" rest" {
		t.Errorf("invalid UTF-8 before it: %q", got)
	}
}

// FuzzText: whatever the text and the secret, Text does not panic, and a
// secret of 4 bytes or more is not in what it returns.
func FuzzText(f *testing.F) {
	f.Add("echo Local+Key/With=Odd and more", "Local+Key/With=Odd")
	f.Add("\xff\xfe ÜNÏ ünï", "ünïcode-key")
	f.Fuzz(func(t *testing.T, s, secret string) {
		got := Text(s, secret)
		if len(secret) >= 4 && utf8.ValidString(secret) && strings.Contains(got, secret) && !strings.Contains(Mark, secret) {
			t.Fatalf("Text(%q, %q) = %q shows the secret", s, secret, got)
		}
	})
}
