package outcome

// Info is one row of the table: everything hfsent knows of an outcome code.
type Info struct {
	Code Code
	// Status is the HTTP status `hfsent serve` answers a row with it.
	Status int
	// Final: --resume keeps the row (running it again would give the same
	// answer, or cost quota for nothing).
	Final bool
	// StopsRun: no other row can succeed either, so a batch stops sending.
	StopsRun bool
	// Retry: whether the provider's call is sent again after this answer.
	Retry Retry
	// Escalates: a row that ends a stage of a cascade (--cascade, or
	// --fallback-model) with this outcome goes on to the next stage: the
	// provider failed it (after its retries), and another may answer. The
	// text's own fault (invalid_input, upstream_request_rejected: a poison
	// row), a row never sent, and what stops the run do not.
	Escalates bool
	// Colour is its colour in `hfsent report`.
	Colour string
	// Advice is what to do about it, in a line (check says it after the
	// answer's own message).
	Advice string
}

// Retry says whether a failed call is sent again.
type Retry uint8

const (
	// RetryNever: another call would get the same answer (or there was no
	// call to repeat).
	RetryNever Retry = iota
	// RetryAlways: the provider may answer the next call (a timeout, a 429).
	RetryAlways
	// RetryTransient: when the provider's status says it may recover
	// (connection errors, 5xx, the CDN's 520-524, TEI's 424), not otherwise.
	RetryTransient
	// RetryOnce: the call is sent once more, no more (a chat model whose
	// answer named no label: the second call tells it so and asks again;
	// a third would answer as the second did).
	RetryOnce
)

// unknownColour draws a code the table does not know.
const unknownColour = "#444444"

// table is the one list of outcomes, in the order the documentation and
// summaries use. Colours: greens for answers, greys for rows never sent,
// warm colours for provider failures.
//
// upstream_quota, upstream_not_found and upstream_endpoint are not final:
// they say the account, the model or the endpoint could not serve, which
// topping up credits or fixing --model or --endpoint mends; nor is
// upstream_truncated, which a larger context (or --max-completion-tokens)
// mends. Its call is not sent again: the same prompt would be cut the same
// way. upstream_refused is final: a model that refused a text (or a
// content filter that stopped its answer) answers the same again.
var table = [...]Info{
	{Code: Success, Status: 200, Final: true, Colour: "#2e9e44"},
	{Code: Fallback, Status: 200, Final: true, Colour: "#17a2b8"},
	{Code: InvalidInput, Status: 422, Final: true, Colour: "#8c8c8c",
		Advice: "fix the row: its error says what is wrong; it was never sent"},
	{Code: LocalCapacity, Status: 503, Colour: "#7b4fbf",
		Advice: "demand was above the calls in flight allowed (--concurrency): add capacity, or send later"},
	{Code: UpstreamTimeout, Status: 504, Retry: RetryAlways, Escalates: true, Colour: "#f28e1c",
		Advice: "raise --timeout if the model is large or loading"},
	{Code: UpstreamRateLimited, Status: 503, Retry: RetryAlways, Escalates: true, Colour: "#e3b505",
		Advice: "the quota is spent for now; a batch would be throttled (see --rps)"},
	{Code: UpstreamFailed, Status: 502, Retry: RetryTransient, Escalates: true, Colour: "#d62728",
		Advice: "the endpoint is down or unreachable"},
	{Code: UpstreamRequestRejected, Status: 502, Final: true, Colour: "#8c564b",
		Advice: "check --model (is it a text-classification model served by this endpoint?)"},
	{Code: UpstreamAuth, Status: 502, StopsRun: true, Colour: "#7f0000",
		Advice: "check the token (a fine-grained token needs the 'Make calls to Inference Providers' permission)"},
	{Code: UpstreamQuota, Status: 502, StopsRun: true, Colour: "#a0522d",
		Advice: "the account cannot pay for calls (no credits left, or pay-as-you-go off for this provider); top up, or bill an organisation with --bill-to ORG"},
	{Code: UpstreamNotFound, Status: 502, StopsRun: true, Colour: "#5c3c1e",
		Advice: "check --model and --endpoint"},
	{Code: UpstreamEndpoint, Status: 502, StopsRun: true, Colour: "#b03060",
		Advice: "the endpoint refuses the call; check --endpoint (a batch would stop at once)"},
	{Code: UpstreamPayload, Status: 502, Escalates: true, Colour: "#e377c2",
		Advice: "the endpoint answered, but not with a text classification"},
	{Code: UpstreamUnlabelled, Status: 502, Retry: RetryOnce, Escalates: true, Colour: "#bcbd22",
		Advice: "the chat model answered with no label of --labels, or several: say it better with --prompt-file, keep --constrain on (the server then has to choose one), or pick another --model"},
	{Code: UpstreamTruncated, Status: 502, Escalates: true, Colour: "#9467bd",
		Advice: "the server cut the prompt to fit its context and answered what was left: raise the model's context (Ollama: num_ctx, or OLLAMA_CONTEXT_LENGTH), or lower --max-chars; or the answer was cut at the completion cap (finish_reason length): give it room with --max-completion-tokens"},
	{Code: UpstreamRefused, Status: 502, Final: true, Escalates: true, Colour: "#6b2e5f",
		Advice: "the model refused to answer (its refusal, summarised, is in error), or the provider's content filter stopped the answer: asking again gets the same; another --model, or a cascade's next stage, may answer"},
	{Code: CircuitOpen, Status: 503, Escalates: true, Colour: "#1f5fbf",
		Advice: "the provider is failing: wait for the breaker to close, or answer meanwhile with --fallback-model"},
	{Code: NotAttempted, Status: 503, Colour: "#c7c7c7",
		Advice: "never sent: send it again (classify --resume redoes it)"},
}
