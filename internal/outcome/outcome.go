// Package outcome holds the stable table of row outcomes: for each code,
// the HTTP status it maps to, whether it is final for --resume, whether it
// stops a batch, whether the provider's call is retried, its colour in
// `hfsent report` and a line of advice. Everything else (the error table's
// retries, serve's statuses, the report's colours, check's advice, the
// README's table, checked by a test) is read from it. Scripts depend on the
// names: change them only via an issue.
package outcome

// Code is the outcome of one row.
type Code string

const (
	Success                 Code = "success"
	Fallback                Code = "fallback"
	InvalidInput            Code = "invalid_input"
	LocalCapacity           Code = "local_capacity"
	UpstreamTimeout         Code = "upstream_timeout"
	UpstreamRateLimited     Code = "upstream_rate_limited"
	UpstreamFailed          Code = "upstream_failed"
	UpstreamRequestRejected Code = "upstream_request_rejected"
	UpstreamAuth            Code = "upstream_auth"
	UpstreamQuota           Code = "upstream_quota"
	UpstreamNotFound        Code = "upstream_not_found"
	UpstreamEndpoint        Code = "upstream_endpoint"
	UpstreamPayload         Code = "upstream_payload"
	UpstreamUnlabelled      Code = "upstream_unlabelled"
	UpstreamTruncated       Code = "upstream_truncated"
	UpstreamRefused         Code = "upstream_refused"
	CircuitOpen             Code = "circuit_open"
	NotAttempted            Code = "not_attempted"
)

// All lists every code in the order the documentation and summaries use:
// the table's.
func All() []Code {
	out := make([]Code, len(table))
	for i, in := range table {
		out[i] = in.Code
	}
	return out
}

// Info returns the table's row for c; ok is false for an unknown code.
func (c Code) Info() (in Info, ok bool) {
	if p := c.info(); p != nil {
		return *p, true
	}
	return unknown(c), false
}

// info is c's row in the table, nil when unknown. It is asked of every row
// written (its status) and kept (final?), so it walks the table by index,
// commonest first, copying nothing.
func (c Code) info() *Info {
	for i := range table {
		if table[i].Code == c {
			return &table[i]
		}
	}
	return nil
}

func unknown(c Code) Info { return Info{Code: c, Status: 500, Colour: unknownColour} }

// Status is the HTTP status the row would get from `hfsent serve` (500 for
// an unknown code).
func (c Code) Status() int {
	if p := c.info(); p != nil {
		return p.Status
	}
	return 500
}

// OK reports whether the row got a usable label.
func (c Code) OK() bool { return c == Success || c == Fallback }

// Final reports whether a row with this outcome needs no redo on --resume:
// running it again would give the same answer or cost quota for nothing.
func (c Code) Final() bool {
	p := c.info()
	return p != nil && p.Final
}

// StopsRun reports whether a row with this outcome means no other row can
// succeed either (the token, the account, the model or the endpoint), so a
// batch stops sending.
func (c Code) StopsRun() bool {
	p := c.info()
	return p != nil && p.StopsRun
}

// Escalates reports whether a row that ends a cascade's stage with this
// outcome goes on to the next stage (Info.Escalates).
func (c Code) Escalates() bool {
	p := c.info()
	return p != nil && p.Escalates
}

// Retry says whether a failed call with this outcome is sent again.
func (c Code) Retry() Retry {
	if p := c.info(); p != nil {
		return p.Retry
	}
	return RetryNever
}

// Colour is the code's colour in `hfsent report` (a dark grey for a code
// the table does not know).
func (c Code) Colour() string {
	if p := c.info(); p != nil {
		return p.Colour
	}
	return unknownColour
}

// Advice is what to do about a row with this outcome, in a line ("" when
// there is nothing to do).
func (c Code) Advice() string {
	if p := c.info(); p != nil {
		return p.Advice
	}
	return ""
}

// Valid reports whether c is one of the known codes.
func (c Code) Valid() bool { return c.info() != nil }
