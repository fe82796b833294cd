package labelset

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// The columns of a label file in CSV.
var csvColumns = []string{"name", "description", "example", "reason"}

// ParseCSV reads a label file in CSV: a header naming the columns name
// (required), description, example and reason (each optional), then one
// row per example:
//
//	name,description,example,reason
//	positive,The customer is glad of the service.,Came on time and fixed the boiler in an hour.,
//	positive,,"Fine, I suppose.","mild, but glad"
//	negative,The customer is unhappy with the visit.,,
//	,,Which day can the engineer come?,
//
// A label's rows need not be together; its place is its first row's, and
// its description is given on any one of them (two different ones are
// refused). A row with a blank example adds none; a row with no name and
// an example is an example that fits no label. The file is UTF-8 (a BOM is
// skipped), RFC 4180, its fields separated by commas, or by semicolons or
// tabs when the header is. A CSV label file has no task.
func ParseCSV(name string, data []byte) (*Set, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{File: name, Msg: fmt.Sprintf("the label file is over %d bytes", MaxFileBytes)}
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	if !utf8.Valid(data) {
		i := 0
		for i < len(data) {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		return nil, &Error{File: name, Line: lineAt(data, i, false), Msg: "the label file is not UTF-8: save it as UTF-8"}
	}
	cr := csv.NewReader(bytes.NewReader(data))
	cr.Comma = csvDelimiter(data)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Line: 1, Msg: "the label file is empty: want a header naming the columns " + strings.Join(csvColumns, ", ")}
	}
	if err != nil {
		return nil, csvError(name, err)
	}
	cols, err := csvHeader(name, header)
	if err != nil {
		return nil, err
	}
	c := csvFile{name: name, cols: cols, width: len(header), s: &Set{File: name}, byName: map[string]int{}, descLine: map[int]int{}}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		if err := c.row(cr, rec); err != nil {
			return nil, err
		}
	}
	if err := c.s.checkLabels(1); err != nil {
		return nil, err
	}
	return c.s, c.s.checkSize()
}

// csvDelimiter is the header line's delimiter: a semicolon or a tab when
// the line holds one and no comma, else a comma.
func csvDelimiter(data []byte) rune {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	if bytes.ContainsRune(line, ',') {
		return ','
	}
	for _, d := range []rune{';', '\t'} {
		if bytes.ContainsRune(line, d) {
			return d
		}
	}
	return ','
}

func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &Error{File: name, Line: max(1, pe.StartLine), Msg: "cannot parse CSV: " + pe.Err.Error()}
	}
	return &Error{File: name, Msg: "cannot read: " + err.Error()}
}

// csvHeader finds the columns by name (spaces around a name ignored): a
// column of another name or one given twice is refused, and name must be
// there. The result is each column's index, -1 when it is not there.
func csvHeader(name string, header []string) (map[string]int, error) {
	cols := map[string]int{}
	for _, c := range csvColumns {
		cols[c] = -1
	}
	for i, h := range header {
		h = strings.TrimSpace(h)
		at, known := cols[h]
		switch {
		case h == "":
			continue // a spreadsheet's trailing delimiter: its cells must be blank (row)
		case !known:
			return nil, &Error{File: name, Line: 1, Key: h, Msg: fmt.Sprintf("unknown column %q: want %s", clip(h), strings.Join(csvColumns, ", "))}
		case at >= 0:
			return nil, &Error{File: name, Line: 1, Key: h, Msg: fmt.Sprintf("column %q given twice (columns %d and %d)", h, at+1, i+1)}
		}
		cols[h] = i
	}
	if cols["name"] < 0 {
		return nil, &Error{File: name, Line: 1, Key: "name", Msg: "no column name: want the columns " + strings.Join(csvColumns, ", ") + " (name required)"}
	}
	return cols, nil
}

type csvFile struct {
	name     string
	cols     map[string]int
	width    int
	s        *Set
	byName   map[string]int // a label's name as written → its index
	descLine map[int]int    // label index → the line of its description
}

// unnamed reports whether column i has a blank name in the header.
func (c *csvFile) unnamed(i int) bool {
	for _, at := range c.cols {
		if at == i {
			return false
		}
	}
	return true
}

// field is a column's value in rec, and the line it starts on.
func (c *csvFile) field(cr *csv.Reader, rec []string, col string) (string, int) {
	i := c.cols[col]
	if i < 0 || i >= len(rec) {
		line, _ := cr.FieldPos(0)
		return "", line
	}
	line, _ := cr.FieldPos(i)
	return rec[i], line
}

func (c *csvFile) row(cr *csv.Reader, rec []string) error {
	line, _ := cr.FieldPos(0)
	if len(rec) > c.width {
		return &Error{File: c.name, Line: line, Msg: fmt.Sprintf("the row has %d fields, the header %d", len(rec), c.width)}
	}
	for i, v := range rec {
		if c.unnamed(i) && strings.TrimSpace(v) != "" {
			at, _ := cr.FieldPos(i)
			return &Error{File: c.name, Line: at, Msg: fmt.Sprintf("column %d has no name in the header, but a value here: name it, or move the value", i+1)}
		}
	}
	name, nameLine := c.field(cr, rec, "name")
	desc, descLine := c.field(cr, rec, "description")
	text, textLine := c.field(cr, rec, "example")
	reason, reasonLine := c.field(cr, rec, "reason")
	name, desc, reason = strings.TrimSpace(name), strings.TrimSpace(desc), strings.TrimSpace(reason)
	for _, f := range []struct {
		key, v string
		line   int
	}{{"description", desc, descLine}, {"reason", reason, reasonLine}} {
		if err := checkText(c.name, f.line, f.key, f.v); err != nil {
			return err
		}
	}
	blank := strings.TrimSpace(text) == ""
	switch {
	case name == "" && desc != "":
		return &Error{File: c.name, Line: nameLine, Key: "name", Msg: "a description without a label name"}
	case blank && reason != "":
		return &Error{File: c.name, Line: reasonLine, Key: "reason", Msg: "a reason without an example"}
	}
	var e *Example
	if !blank {
		e = &Example{Text: text, Reason: reason, Line: textLine}
		if err := checkExample(c.name, textLine, "example", *e); err != nil {
			return err
		}
	}
	if name == "" {
		if e != nil {
			c.s.None = append(c.s.None, *e)
		}
		return nil
	}
	return c.add(name, nameLine, desc, descLine, e)
}

// add puts a row's description and example on its label, the label made
// on its first row.
func (c *csvFile) add(name string, line int, desc string, descLine int, e *Example) error {
	i, ok := c.byName[name]
	if !ok {
		i = len(c.s.Labels)
		c.byName[name] = i
		c.s.Labels = append(c.s.Labels, Label{Name: name, Line: line})
	}
	l := &c.s.Labels[i]
	switch {
	case desc == "":
	case l.Description == "":
		l.Description, c.descLine[i] = desc, descLine
	case l.Description != desc:
		return &Error{File: c.name, Line: descLine, Key: "description", Msg: fmt.Sprintf("label %q has another description at line %d: give it once", clip(name), c.descLine[i])}
	}
	if e != nil {
		l.Examples = append(l.Examples, *e)
	}
	return nil
}
