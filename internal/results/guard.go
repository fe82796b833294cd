package results

// The formula guard. A spreadsheet opening a CSV runs a cell that begins
// with = + - or @ as a formula (tab and CR too, in some), so text written by
// customers, or a label or error from the provider, could run
// =HYPERLINK(...) or a DDE command on the reader's machine. OWASP's advice
// is to make such a cell text with a leading apostrophe, which spreadsheets
// hide. request_id is not guarded: it is the operator's own key, already in
// their input file as it is, and joins need it unchanged.
//
// The guard must read back exactly (--resume rewrites kept rows; a label
// may really be "-1"), so it is a reversible escape: a field that begins
// with a trigger, or with ' followed by a trigger or by another ', gets one
// more ' in front; on reading, a leading ' followed by a trigger or a ' is
// dropped. Any other field, one that begins with ' alone included, is
// written and read as it is. A spreadsheet shows every guarded field as it
// was, since it hides exactly the one leading apostrophe added.

// isTrigger reports whether a field beginning with b would be run as a
// formula.
func isTrigger(b byte) bool {
	switch b {
	case '=', '+', '-', '@', '\t', '\r':
		return true
	}
	return false
}

// guarded reports whether Guard changes s.
func guarded(s string) bool {
	if s == "" {
		return false
	}
	if isTrigger(s[0]) {
		return true
	}
	return s[0] == '\'' && len(s) > 1 && (isTrigger(s[1]) || s[1] == '\'')
}

// Guard returns s as the results file holds it when the guard is on.
func Guard(s string) string {
	if guarded(s) {
		return "'" + s
	}
	return s
}

// Unguard undoes Guard: Unguard(Guard(s)) == s for every s.
func Unguard(s string) string {
	if len(s) > 1 && s[0] == '\'' && (isTrigger(s[1]) || s[1] == '\'') {
		return s[1:]
	}
	return s
}
