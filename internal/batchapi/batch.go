// Package batchapi is a typed client of the OpenAI-style Files and Batches
// API (OpenAI, Groq, Together, OpenRouter): upload a JSONL file of
// requests, create a batch from it, poll it, cancel it, and stream its
// output and error files back. It also writes the request file
// (RequestWriter) and reads the result files (ReadResults), strictly: a
// line it cannot map to exactly one request it sent is an error, never a
// guess.
//
// It is a client of its own on the project's transport
// (provider.NewHTTPClient), not an SDK's, for the same reasons the chat
// provider is: the token must never be shown, a provider's error body is
// summarised rather than echoed, and the caller needs the status, the
// error code and the retry hint to decide what to do.
package batchapi

// Batch statuses, as OpenAI names them.
const (
	StatusValidating = "validating"
	StatusFailed     = "failed"
	StatusInProgress = "in_progress"
	StatusFinalizing = "finalizing"
	StatusCompleted  = "completed"
	StatusExpired    = "expired"
	StatusCancelling = "cancelling"
	StatusCancelled  = "cancelled"
)

// EndpointChat is the endpoint every request line and every batch names.
const EndpointChat = "/v1/chat/completions"

// CompletionWindow is the only window OpenAI offers.
const CompletionWindow = "24h"

// Error codes a batch's errors (or a result line's error) carry that a
// runner acts on.
const (
	// CodeTokenLimitExceeded: the batch would put the model over its
	// enqueued-token cap; it fails at once and may be created again once
	// earlier batches have ended.
	CodeTokenLimitExceeded = "token_limit_exceeded"
	// CodeBatchExpired: the request was not run within the completion
	// window (an error-file line).
	CodeBatchExpired = "batch_expired"
	// CodeBatchCancelled: the request was not run because the batch was
	// cancelled (an error-file line).
	CodeBatchCancelled = "batch_cancelled"
)

// File is an uploaded file.
type File struct {
	ID    string
	Bytes int64
	// Status is the file's status as the provider said it ("uploaded",
	// "processed", "error"; "" if it said none).
	Status string
}

// Batch is a batch as the provider describes it.
type Batch struct {
	ID, Status                             string
	InputFileID, OutputFileID, ErrorFileID string
	Endpoint, CompletionWindow             string
	// CreatedAt and ExpiresAt are Unix seconds (0: not said).
	CreatedAt, ExpiresAt int64
	Counts               RequestCounts
	// Metadata is what the batch was created with (CreateWith), nil if none.
	Metadata map[string]string
	// Model is the model the provider says ran the batch ("" if not said).
	Model string
	// Usage is the tokens the batch used, when the provider says (OpenAI,
	// for batches created since September 2025).
	Usage Usage
	// Errors are the batch's own errors (validation, the token cap), not
	// those of its requests (those are in the error file).
	Errors []BatchError
}

// Usage is a batch's usage: input, output and total tokens.
type Usage struct{ Input, Output, Total int }

// RequestCounts is a batch's request_counts.
type RequestCounts struct{ Total, Completed, Failed int }

// BatchError is one of a batch's errors. Message is summarised (one line,
// bounded, anything that looks like a credential redacted). Line is the
// input file's line it names (1-based), 0 when none.
type BatchError struct {
	Code, Message, Param string
	Line                 int
}

// Ended reports whether the batch will not change any more: completed,
// failed, expired or cancelled.
func (b Batch) Ended() bool {
	switch b.Status {
	case StatusCompleted, StatusFailed, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// HasError reports whether one of the batch's errors has code.
func (b Batch) HasError(code string) bool {
	for _, e := range b.Errors {
		if e.Code == code {
			return true
		}
	}
	return false
}

// knownStatus reports whether s is one of the statuses above.
func knownStatus(s string) bool {
	switch s {
	case StatusValidating, StatusFailed, StatusInProgress, StatusFinalizing,
		StatusCompleted, StatusExpired, StatusCancelling, StatusCancelled:
		return true
	}
	return false
}
