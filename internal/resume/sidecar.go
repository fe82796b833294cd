package resume

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Identity is what --resume needs to know about the run that wrote an
// output: it is kept beside the output in OUTPUT.hfsent.json (the results
// CSV stays a plain CSV), and beside a resume's temporary file in
// OUTPUT.hfsent-resume.json.
type Identity struct {
	Version int `json:"version"`
	// Input is the input's path as given, or "stdin"; a resume reads the
	// file again through it.
	Input       string `json:"input"`
	InputSize   int64  `json:"input_size"`
	InputSHA256 string `json:"input_sha256,omitempty"` // "" when the input is not a regular file
	Provider    string `json:"provider"`
	Model       string `json:"model"`
	IDColumn    string `json:"id_column"`
	TextColumn  string `json:"text_column"`
	// How the input was read; "" in a sidecar written before they were
	// recorded, when it was always a comma and UTF-8.
	Delimiter string `json:"delimiter,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
}

const identityVersion = 1

// mismatch says how prev (the sidecar of the existing output) differs from
// cur (this run), or "" when the output may be resumed.
func (cur Identity) mismatch(prev Identity) string {
	switch {
	case cur.InputSHA256 == "":
		return fmt.Sprintf("this run's input %s is not a regular file, so it cannot be checked against the earlier run", cur.Input)
	case prev.InputSHA256 == "":
		return fmt.Sprintf("it was written from %s, which cannot be checked", prev.Input)
	case prev.InputSHA256 != cur.InputSHA256 || prev.InputSize != cur.InputSize:
		return fmt.Sprintf("it was written from a different input (%s, %d bytes, sha256 %.12s…)", prev.Input, prev.InputSize, prev.InputSHA256)
	case prev.Provider != cur.Provider || prev.Model != cur.Model:
		return fmt.Sprintf("it was written by --provider %s --model %s, not --provider %s --model %s", prev.Provider, prev.Model, cur.Provider, cur.Model)
	case prev.IDColumn != cur.IDColumn || prev.TextColumn != cur.TextColumn:
		return fmt.Sprintf("it was written with --id-column %q --text-column %q", prev.IDColumn, prev.TextColumn)
	case cmp.Or(prev.Delimiter, ",") != cmp.Or(cur.Delimiter, ",") || cmp.Or(prev.Encoding, "utf-8") != cmp.Or(cur.Encoding, "utf-8"):
		return fmt.Sprintf("it was written reading the input with delimiter %s and encoding %s, this run reads it with %s and %s (see --delimiter, --encoding)",
			cmp.Or(prev.Delimiter, ","), cmp.Or(prev.Encoding, "utf-8"), cmp.Or(cur.Delimiter, ","), cmp.Or(cur.Encoding, "utf-8"))
	}
	return ""
}

// writeIdentity writes id to path through a temporary file and a rename, so
// that a crash leaves the old file or the new one, never half of one.
func writeIdentity(fsys fileSystem, path string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(append(b, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = fsys.Rename(tmp, path)
	}
	if werr != nil {
		_ = fsys.Remove(tmp)
	}
	return werr
}

func readIdentity(path string) (Identity, error) {
	var id Identity
	b, err := os.ReadFile(path)
	if err != nil {
		return id, err
	}
	return id, json.Unmarshal(b, &id)
}

// sameID matches an id in the results with the input's: results carry the
// id exactly as read, but files written before that carry it trimmed, and
// surrounding spaces never make a different id.
func sameID(result, in string) bool {
	return strings.TrimSpace(result) == strings.TrimSpace(in)
}
