package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/labelset"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/stage"
)

// Bounds of --tpm and of a --prompt-file.
const (
	maxTPM        = stage.MaxTPM
	maxPromptSize = stage.MaxPromptSize
)

// addLabelFlags adds the flags that ask a model to choose among labels:
// --labels (chat; zero-shot with hf), --prompt-file (chat), --token-env,
// --constrain and --tpm. They are provider flags (classify, serve, worker,
// a --cascade's stage).
func addLabelFlags(fs *pflag.FlagSet, o *stage.Config) {
	fs.StringVar(&o.Labels, "labels", "", fmt.Sprintf("comma-separated labels the model must choose from (%d to %d, distinct; a label holds no comma and no quote): required with --provider chat; with --provider hf, zero-shot classification (sent as parameters.candidate_labels)", provider.MinLabels, provider.MaxLabels))
	fs.StringVar(&o.LabelsFile, "labels-file", "", "a label file (YAML, or CSV when named *.csv): the task, each label's name, description and examples, and texts that fit none (docs/guides/labels.md); in place of --labels. chat: rendered as the system message, first and the same for every row (a prompt cache can reuse it); hf zero-shot: the descriptions are sent as the hypotheses")
	fs.StringVar(&o.Examples, "examples", "", "chat: a labelled CSV (its columns --examples-text-column and --examples-label-column) to choose few-shot examples from, --examples-per-label of each label, by the smallest SHA-256 of their texts (the same file gives the same prompt); added to the label file's own")
	fs.StringVar(&o.ExamplesTextColumn, "examples-text-column", stage.ExamplesTextColumn, "the column of --examples holding the texts")
	fs.StringVar(&o.ExamplesLabelColumn, "examples-label-column", stage.ExamplesLabelColumn, "the column of --examples holding the labels (a label of the set, matched as --labels are; a blank cell skips the row)")
	fs.IntVar(&o.ExamplesPerLabel, "examples-per-label", 3, "examples of each label chosen from --examples ("+rangeHelp(1, labelset.MaxPerLabel)+")")
	fs.BoolVar(&o.MultiLabel, "multi-label", false, "several labels a row: chat asks for an array of the labels (at least one, unless the label file has texts that fit none); hf scores each label on its own (a text-classification model's sigmoid scores, zero-shot's multi_label) and takes those at --label-threshold or over. label is then the labels in the label set's order joined by ';', scores every label the answer scored, score the lowest chosen label's. Not with a calibration or a cascade")
	fs.Float64Var(&o.LabelThreshold, "label-threshold", 0.5, "--multi-label with hf: a label is chosen when its score reaches this; a row gets at least its best label ("+rangeHelp(0.0001, 1.0)+")")
	fs.IntVar(&o.TopK, "top-k", 0, "write the K best labels and their scores, best first, in the scores column (label=score pairs joined by ';'): a text-classification or zero-shot model's, a chat model's from its logprobs, the local model's three (0: none, else "+rangeHelp(1, stage.MaxTopK)+")")
	fs.StringVar(&o.HypothesisTemplate, "hypothesis-template", "", "hf zero-shot (--labels or --labels-file): the sentence each label is put in, {} standing for the label's description (or its name when it has none), e.g. \"This review is {}.\"; exactly one {} and no other brace. Sent as each label's hypothesis (\"\": a label file's descriptions as written, else the server's \""+labelset.DefaultHypothesisTemplate+"\")")
	fs.StringVar(&o.PromptFile, "prompt-file", "", "chat: a template sent as the user message instead of the default instruction; {labels} is replaced by the labels, {text} (required) by the row's text")
	fs.StringVar(&o.TokenEnv, "token-env", "", "read the token from this environment variable instead of HF_TOKEN and the token file (e.g. OPENAI_API_KEY)")
	addConstrainFlag(fs, &o.Constrain)
	fs.StringVar(&o.ReasoningEffort, "reasoning-effort", "", "chat: a reasoning model's effort, sent as reasoning_effort: "+strings.Join(provider.ReasoningEfforts, ", ")+"; it also says the model is a reasoning model (sent max_completion_tokens, no temperature), as a gpt-5*, o1*, o3* or o4* name does (\"\": none sent)")
	fs.IntVar(&o.MaxCompletionTokens, "max-completion-tokens", 0, "chat: the answer's token cap, reasoning tokens included (0: the longest label's room, and for a reasoning model the effort's: 1024 minimal, 4096 low, 8192 medium, 25000 high; else "+rangeHelp(1, provider.MaxCompletionTokens)+")")
	fs.StringVar(&o.ServiceTier, "service-tier", "", "chat: OpenAI's service tier, sent as service_tier: "+strings.Join(provider.ServiceTiers, ", ")+" (flex: about half the price, slower, may answer 429; the answer's own tier prices the call; \"\": none sent)")
	fs.IntVar(&o.TPM, "tpm", 0, "tokens per minute (prompt and completion) sent to a chat provider, paced at tpm/60 a second (0: paced by the server's x-ratelimit headers, else "+rangeHelp(1, maxTPM)+")")
}

// addConstrainFlag adds --constrain, which classify, serve, worker and
// check take.
func addConstrainFlag(fs *pflag.FlagSet, v *string) {
	fs.StringVar(v, "constrain", "auto", "chat: make the server choose one of --labels (structured outputs): json-schema (OpenAI's response_format json_schema: OpenAI, vLLM, llama.cpp, Ollama), choice (vLLM's structured_outputs), regex (TGI's grammar), off (read the answer as plain text); auto starts with json-schema and moves down, once for the run, each time the server refuses one")
}

// chatAdvice is what to do about an outcome of a chat model, where the
// table's advice (advice) speaks of text-classification models.
func chatAdvice(c outcome.Code, advice string) string {
	switch c {
	case outcome.UpstreamRequestRejected:
		return "the chat endpoint refused this request (its reason says why): a text over the model's context, a parameter it does not take (--constrain off sends none of structured outputs)"
	case outcome.UpstreamPayload:
		return "the endpoint answered, but not with a chat completion: is --endpoint an OpenAI-compatible /v1/chat/completions?"
	case outcome.UpstreamNotFound:
		return "check --model (the id this chat endpoint serves) and --endpoint"
	case outcome.UpstreamEndpoint:
		return "the endpoint refuses the call: check --endpoint (an OpenAI-compatible /v1/chat/completions) and --model"
	}
	return advice
}
