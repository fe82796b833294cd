// Package outcome holds the stable table of row outcomes and the HTTP status
// each maps to. Scripts depend on these names: change them only via an issue.
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
	CircuitOpen             Code = "circuit_open"
	NotAttempted            Code = "not_attempted"
)

// All lists every code in the order the documentation and summaries use.
func All() []Code {
	return []Code{Success, Fallback, InvalidInput, LocalCapacity, UpstreamTimeout,
		UpstreamRateLimited, UpstreamFailed, UpstreamRequestRejected, UpstreamAuth,
		UpstreamQuota, UpstreamNotFound, UpstreamEndpoint, UpstreamPayload, CircuitOpen, NotAttempted}
}

// Status is the HTTP status the row would get from `hfsent serve`.
func (c Code) Status() int {
	switch c {
	case Success, Fallback:
		return 200
	case InvalidInput:
		return 422
	case LocalCapacity, UpstreamRateLimited, CircuitOpen, NotAttempted:
		return 503
	case UpstreamTimeout:
		return 504
	case UpstreamFailed, UpstreamRequestRejected, UpstreamAuth, UpstreamQuota, UpstreamNotFound, UpstreamEndpoint, UpstreamPayload:
		return 502
	}
	return 500
}

// OK reports whether the row got a usable label.
func (c Code) OK() bool { return c == Success || c == Fallback }

// Final reports whether a row with this outcome needs no redo on --resume:
// running it again would give the same answer or cost quota for nothing.
// upstream_quota, upstream_not_found and upstream_endpoint are not: they say
// the account, the model or the endpoint could not serve, which topping up
// credits or fixing --model or --endpoint mends.
func (c Code) Final() bool {
	return c == Success || c == Fallback || c == InvalidInput || c == UpstreamRequestRejected
}

// StopsRun reports whether a row with this outcome means no other row can
// succeed either (the token, the account, the model or the endpoint), so a
// batch stops sending.
func (c Code) StopsRun() bool {
	return c == UpstreamAuth || c == UpstreamQuota || c == UpstreamNotFound || c == UpstreamEndpoint
}

// Valid reports whether c is one of the known codes.
func (c Code) Valid() bool {
	for _, k := range All() {
		if k == c {
			return true
		}
	}
	return false
}
