package redact

import (
	"net/url"
	"strings"
	"testing"
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
