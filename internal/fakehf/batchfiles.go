package fakehf

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// batchFile is one stored file: its object's fields and where its bytes are.
type batchFile struct {
	ID, Filename, Purpose string
	Bytes                 int64
	Created               time.Time
	path                  string
}

func (f *batchFile) object() map[string]any {
	return map[string]any{"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.Created.Unix(),
		"filename": f.Filename, "purpose": f.Purpose, "status": "processed", "status_details": nil, "expires_at": nil}
}

// filePurposes are the purposes file_object.py lists.
var filePurposes = map[string]bool{"assistants": true, "batch": true, "fine-tune": true, "vision": true, "user_data": true, "evals": true}

// upload reads the multipart form a part at a time: the file part is copied
// to disk as it arrives, so an upload of any size costs a buffer.
func (b *Batch) upload(w http.ResponseWriter, r *http.Request) {
	b.uploads.Add(1)
	if b.RefuseChunked && r.ContentLength < 0 {
		invalid(w, 400, "", "The request must have a Content-Length.")
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		invalid(w, 400, "", "The request must be multipart/form-data: "+err.Error())
		return
	}
	var purpose, name string
	var stored *batchFile
	defer func() {
		if stored != nil && stored.ID == "" {
			_ = os.Remove(stored.path)
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			invalid(w, 400, "", "The multipart body cannot be read: "+err.Error())
			return
		}
		switch part.FormName() {
		case "purpose":
			v, _ := io.ReadAll(io.LimitReader(part, 64))
			purpose = string(v)
		case "file":
			name = part.FileName()
			var tooLarge bool
			stored, tooLarge, err = b.store(part)
			if err != nil {
				oaiError(w, 500, "server_error", "", "The server had an error while storing the file.")
				return
			}
			if tooLarge {
				drain(r.Body)
				invalid(w, 400, "", "File is too large.")
				return
			}
		}
		drain(part)
	}
	if !b.checkUpload(w, purpose, name, stored) {
		return
	}
	stored.ID, stored.Filename, stored.Purpose, stored.Created = b.id("file-"), name, purpose, time.Now()
	b.addFile(stored)
	writeJSON(w, 200, stored.object())
}

// checkUpload answers OpenAI's refusals of a form it cannot take.
func (b *Batch) checkUpload(w http.ResponseWriter, purpose, name string, f *batchFile) bool {
	switch {
	case purpose == "":
		invalid(w, 400, "purpose", "Missing required parameter: 'purpose'.")
	case !filePurposes[purpose]:
		invalid(w, 400, "purpose", "Invalid value for 'purpose': '"+purpose+"'. Supported values are: 'assistants', 'batch', 'fine-tune', 'vision', 'user_data' and 'evals'.")
	case f == nil:
		invalid(w, 400, "file", "Missing required parameter: 'file'.")
	case purpose == "batch" && !strings.HasSuffix(name, ".jsonl"):
		invalid(w, 400, "", "Invalid file format for Batch API. Must be .jsonl")
	default:
		return true
	}
	return false
}

// store copies r to a new file in the fake's directory, at most
// maxFileBytes (tooLarge past it).
func (b *Batch) store(r io.Reader) (f *batchFile, tooLarge bool, err error) {
	tmp, err := os.CreateTemp(b.dir, "upload-*.jsonl")
	if err != nil {
		return nil, false, err
	}
	defer tmp.Close()
	f = &batchFile{path: tmp.Name()}
	src, most := r, b.maxFileBytes()
	if most > 0 {
		src = io.LimitReader(r, most+1)
	}
	f.Bytes, err = io.Copy(tmp, src)
	if err != nil {
		return f, false, err
	}
	return f, most > 0 && f.Bytes > most, nil
}

func (b *Batch) addFile(f *batchFile) {
	b.fmu.Lock()
	b.files[f.ID] = f
	b.fmu.Unlock()
}

func (b *Batch) file(id string) *batchFile {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	return b.files[id]
}

func (b *Batch) fileObject(w http.ResponseWriter, r *http.Request) {
	f := b.file(r.PathValue("id"))
	if f == nil {
		invalid(w, 404, "", "No such File object: "+r.PathValue("id"))
		return
	}
	writeJSON(w, 200, f.object())
}

// deleteFile removes a file, as OpenAI's DELETE /files/{id} answers it. A
// batch reading it as its input still reads it (the bytes stay on disk
// until Close).
func (b *Batch) deleteFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b.fmu.Lock()
	f := b.files[id]
	delete(b.files, id)
	b.fmu.Unlock()
	if f == nil {
		invalid(w, 404, "", "No such File object: "+id)
		return
	}
	b.deletes.Add(1)
	writeJSON(w, 200, map[string]any{"id": id, "object": "file", "deleted": true})
}

// content streams a file's bytes from disk.
func (b *Batch) content(w http.ResponseWriter, r *http.Request) {
	b.downloads.Add(1)
	f := b.file(r.PathValue("id"))
	if f == nil {
		invalid(w, 404, "", "No such File object: "+r.PathValue("id"))
		return
	}
	in, err := os.Open(f.path)
	if err != nil {
		oaiError(w, 500, "server_error", "", "The server had an error while reading the file.")
		return
	}
	defer in.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, in)
}

// requestLine is what the fake reads of an input line.
type requestLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// scanned is what validating an input file found.
type scanned struct {
	lines, tokens int
	model         string
	errs          []batchError
}

// batchError is one of errors.data (batch_error.py).
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// scan validates an input file a line at a time, as OpenAI's validating
// step does, keeping only its custom_ids (for duplicates) and counts.
// The error codes are the fake's; OpenAI's own are not documented.
func (b *Batch) scan(f *batchFile, endpoint string) (scanned, error) {
	var s scanned
	in, err := os.Open(f.path)
	if err != nil {
		return s, err
	}
	defer in.Close()
	rd := bufio.NewReaderSize(in, 64<<10)
	seen := map[string]struct{}{}
	for n := 1; ; n++ {
		raw, err := rd.ReadBytes('\n')
		if len(strings.TrimSpace(string(raw))) > 0 {
			s.lines++
			if e, ok := s.check(raw, n, endpoint, seen); !ok && len(s.errs) < 10 {
				s.errs = append(s.errs, e)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
	}
	switch {
	case s.lines == 0:
		s.errs = append(s.errs, batchError{Code: "empty_file", Message: "The batch input file is empty."})
	case b.maxRequests() > 0 && s.lines > b.maxRequests():
		s.errs = append(s.errs, batchError{Code: "too_many_requests", Message: "The batch input file contains " + itoa(s.lines) + " requests, more than the maximum of " + itoa(b.maxRequests()) + " requests per batch."})
	}
	return s, nil
}

// check validates one line (n from 1).
func (s *scanned) check(raw []byte, n int, endpoint string, seen map[string]struct{}) (batchError, bool) {
	line := n
	bad := func(code, msg string) (batchError, bool) {
		return batchError{Code: code, Message: msg, Line: &line}, false
	}
	var l requestLine
	if json.Unmarshal(raw, &l) != nil {
		return bad("invalid_json_line", "This line is not parseable as valid JSON.")
	}
	var body struct {
		Model string `json:"model"`
	}
	switch {
	case l.CustomID == "":
		return bad("missing_required_parameter", "Missing required parameter: 'custom_id'.")
	case l.Method != http.MethodPost:
		return bad("invalid_method", "Invalid method '"+l.Method+"'. Only POST is supported.")
	case l.URL != endpoint:
		return bad("mismatched_endpoint", "The endpoint of this request ("+l.URL+") does not match the endpoint of the batch ("+endpoint+").")
	case len(l.Body) == 0 || l.Body[0] != '{' || json.Unmarshal(l.Body, &body) != nil:
		return bad("invalid_request", "The body of this request is not a JSON object.")
	}
	if _, dup := seen[l.CustomID]; dup {
		return bad("duplicate_custom_id", "The custom_id '"+l.CustomID+"' is used by more than one request; custom_ids must be unique.")
	}
	seen[l.CustomID] = struct{}{}
	if s.model == "" {
		s.model = body.Model
	} else if body.Model != s.model {
		return bad("mismatched_model", "The model of this request ("+body.Model+") is not the model of the batch's other requests ("+s.model+").")
	}
	s.tokens += BatchTokens(l.Body)
	return batchError{}, true
}

// newOutput makes an empty output or error file for a batch.
func (b *Batch) newOutput(kind string) (*os.File, error) {
	return os.CreateTemp(b.dir, filepath.Base(kind)+"-*.jsonl")
}
