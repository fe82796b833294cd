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
	// What a calibration fitted on these results is for (hfsent
	// calibrate reads them): the labels asked for (--labels), the label
	// map, and the hash of the request the run sent for a fixed text.
	Labels        []string `json:"labels,omitempty"`
	LabelMap      string   `json:"label_map,omitempty"`
	RequestSHA256 string   `json:"request_sha256,omitempty"`
	// What changed the rows as they were written, which a resume must
	// write the same way: the calibration file's SHA-256 and
	// --review-below.
	Calibration string `json:"calibration_sha256,omitempty"`
	ReviewBelow string `json:"review_below,omitempty"`
	// Cascade is the hash of a --cascade's settings (every stage's
	// provider, model, request, label map, calibration and
	// escalate-below), "" without one: a resume in the middle of a
	// cascade must send its rows through the same stages, or the file
	// would mix two cascades' answers. Provider and Model are then its
	// first stage's.
	Cascade string `json:"cascade_sha256,omitempty"`
	// How the labels were asked for, which a resume must ask the same way
	// (the scores column and the labels of the rows kept would not match
	// the rest): --multi-label and its --label-threshold ("" without
	// it), --top-k, and the label set's SHA-256 (stage.LabelSetSHA256:
	// the label file with --examples' choice, or --labels; with
	// --hypothesis-template; "" for a model with labels of its own).
	// Recorded from version 2; a sidecar before it recorded none, and
	// they are not compared.
	MultiLabel     bool   `json:"multi_label,omitempty"`
	LabelThreshold string `json:"label_threshold,omitempty"`
	TopK           int    `json:"top_k,omitempty"`
	LabelSet       string `json:"label_set_sha256,omitempty"`
}

// identityVersion 2 records the label settings (MultiLabel, TopK, ...).
const identityVersion = 2

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
	case prev.Cascade != cur.Cascade:
		return fmt.Sprintf("it was written with %s, this run has %s", prev.cascade(), cur.cascade())
	case prev.Version >= 2 && cur.labelChanges(prev) != "":
		return cur.labelChanges(prev)
	case prev.LabelMap != cur.LabelMap || prev.Calibration != cur.Calibration || prev.ReviewBelow != cur.ReviewBelow:
		return fmt.Sprintf("it was written with %s, this run asks %s", prev.answers(), cur.answers())
	case cmp.Or(prev.Delimiter, ",") != cmp.Or(cur.Delimiter, ",") || cmp.Or(prev.Encoding, "utf-8") != cmp.Or(cur.Encoding, "utf-8"):
		return fmt.Sprintf("it was written reading the input with delimiter %s and encoding %s, this run reads it with %s and %s (see --delimiter, --encoding)",
			cmp.Or(prev.Delimiter, ","), cmp.Or(prev.Encoding, "utf-8"), cmp.Or(cur.Delimiter, ","), cmp.Or(cur.Encoding, "utf-8"))
	}
	return ""
}

// labelChanges says which label settings of prev (the earlier run) cur
// changes, and how to resume: "" when none.
func (cur Identity) labelChanges(prev Identity) string {
	var was, now []string
	note := func(changed bool, p, c string) {
		if changed {
			was, now = append(was, p), append(now, c)
		}
	}
	note(prev.MultiLabel != cur.MultiLabel, onOff("--multi-label", prev.MultiLabel), onOff("--multi-label", cur.MultiLabel))
	note(prev.MultiLabel && cur.MultiLabel && prev.LabelThreshold != cur.LabelThreshold,
		"--label-threshold "+prev.LabelThreshold, "--label-threshold "+cur.LabelThreshold)
	note(prev.TopK != cur.TopK, topK(prev.TopK), topK(cur.TopK))
	note(prev.LabelSet != cur.LabelSet, labelSet(prev.LabelSet), labelSet(cur.LabelSet))
	if len(was) == 0 {
		return ""
	}
	return fmt.Sprintf("its labels were asked for with %s, this run asks %s (its rows would not match those already written): give the earlier run's settings (%s) to resume it",
		strings.Join(was, " and "), strings.Join(now, " and "), strings.Join(was, " and "))
}

func onOff(flag string, on bool) string {
	if on {
		return flag
	}
	return "no " + flag
}

func topK(k int) string {
	if k == 0 {
		return "no --top-k"
	}
	return fmt.Sprintf("--top-k %d", k)
}

func labelSet(sha string) string {
	if sha == "" {
		return "no label set (--labels, --labels-file)"
	}
	return fmt.Sprintf("the label set of sha256 %.12s… (--labels, --labels-file, --examples, --hypothesis-template)", sha)
}

// cascade says which cascade a run had, for a message.
func (id Identity) cascade() string {
	if id.Cascade == "" {
		return "no --cascade"
	}
	return fmt.Sprintf("a --cascade whose stages' settings hash to %.12s…", id.Cascade)
}

// answers says how a run changed the answers it wrote, for a message.
func (id Identity) answers() string {
	var s []string
	if id.LabelMap != "" {
		s = append(s, fmt.Sprintf("--label-map %q", id.LabelMap))
	}
	if id.Calibration != "" {
		s = append(s, fmt.Sprintf("--calibration (a file of sha256 %.12s…)", id.Calibration))
	}
	if id.ReviewBelow != "" {
		s = append(s, "--review-below "+id.ReviewBelow)
	}
	if len(s) == 0 {
		return "no --label-map, --calibration or --review-below"
	}
	return strings.Join(s, " ")
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

// ReadIdentity reads the identity kept beside the results file output
// (OUTPUT.hfsent.json): what calibrate knows of the run that wrote it.
func ReadIdentity(output string) (Identity, error) { return readIdentity(output + SidecarSuffix) }

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
