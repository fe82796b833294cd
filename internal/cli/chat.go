package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// labelOptions are the flags that ask a model to choose among labels:
// --labels (chat; zero-shot with hf), --prompt-file (chat), --token-env
// and --tpm. They are provider flags (classify, serve, worker).
type labelOptions struct {
	labels     string
	promptFile string
	tokenEnv   string
	tpm        int
	constrain  string

	// Read by validate: the labels split, the template read.
	list   []string
	prompt string
}

// Bounds of --tpm and of a --prompt-file.
const (
	maxTPM        = 1_000_000_000
	maxPromptSize = 64 << 10
)

func addLabelFlags(fs *pflag.FlagSet, o *labelOptions) {
	fs.StringVar(&o.labels, "labels", "", fmt.Sprintf("comma-separated labels the model must choose from (%d to %d, distinct; a label holds no comma and no quote): required with --provider chat; with --provider hf, zero-shot classification (sent as parameters.candidate_labels)", provider.MinLabels, provider.MaxLabels))
	fs.StringVar(&o.promptFile, "prompt-file", "", "chat: a template sent as the user message instead of the default instruction; {labels} is replaced by the labels, {text} (required) by the row's text")
	fs.StringVar(&o.tokenEnv, "token-env", "", "read the token from this environment variable instead of HF_TOKEN and the token file (e.g. OPENAI_API_KEY)")
	addConstrainFlag(fs, &o.constrain)
	fs.IntVar(&o.tpm, "tpm", 0, "tokens per minute (prompt and completion) sent to a chat provider, paced at tpm/60 a second (0: paced by the server's x-ratelimit headers, else "+rangeHelp(1, maxTPM)+")")
}

// addConstrainFlag adds --constrain, which classify, serve, worker and
// check take.
func addConstrainFlag(fs *pflag.FlagSet, v *string) {
	fs.StringVar(v, "constrain", "auto", "chat: make the server choose one of --labels (structured outputs): json-schema (OpenAI's response_format json_schema: OpenAI, vLLM, llama.cpp, Ollama), choice (vLLM's structured_outputs), regex (TGI's grammar), off (read the answer as plain text); auto starts with json-schema and moves down, once for the run, each time the server refuses one")
}

// checkConstrain refuses a --constrain that is no constraint, or one given
// for a provider that is not chat.
func checkConstrain(v string, given, chat bool) error {
	if _, _, err := provider.ParseConstrain(v); err != nil || v == "" {
		if err == nil {
			err = fmt.Errorf("want one of %s, got %q", strings.Join(provider.ConstrainNames, ", "), v)
		}
		return usageErrorf("--constrain: %v", err)
	}
	if given && !chat {
		return usageErrorf("--constrain is for --provider chat (or a chat:MODEL --fallback-model)")
	}
	return nil
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

// chatFallback is the prefix of a --fallback-model asked as a chat model
// ("chat:MODEL"); "hf:MODEL" names a Hugging Face API model.
const (
	chatPrefix = "chat:"
	hfPrefix   = "hf:"
)

// parseLabels reads --labels: comma-separated, spaces around each
// trimmed, checked as provider.CheckLabels checks them. Every comma
// separates, so a label holds none; a double quote is refused rather than
// read as CSV quoting: '"a,b",c' would otherwise be the three labels "a,
// b" and c, and "a be written as a label with success.
func parseLabels(v string) ([]string, error) {
	if i := strings.IndexByte(v, '"'); i >= 0 {
		return nil, usageErrorf("--labels: a double quote at character %d: labels are split at every comma, so a label can hold neither a comma nor a quote (write --labels a,b,c)", utf8.RuneCountInString(v[:i])+1)
	}
	var out []string
	for _, l := range strings.Split(v, ",") {
		out = append(out, strings.TrimSpace(l))
	}
	if err := provider.CheckLabels(out); err != nil {
		return nil, usageErrorf("--labels: %v", err)
	}
	return out, nil
}

// validate checks the label flags for kind (and the fallback's), before
// anything is opened or sent; it reads --prompt-file.
func (o *labelOptions) validate(kind provider.Kind, fs *pflag.FlagSet, fallback string) error {
	given := fs != nil && fs.Changed("labels")
	if given {
		var err error
		if o.list, err = parseLabels(o.labels); err != nil {
			return err
		}
	}
	if kind.Chat && !given {
		return usageErrorf("--provider chat needs --labels a,b,...: the labels the model must answer with")
	}
	if o.promptFile != "" {
		if !kind.Chat && !strings.HasPrefix(fallback, chatPrefix) {
			return usageErrorf("--prompt-file is for --provider chat (or a chat:MODEL --fallback-model)")
		}
		b, err := readBounded(o.promptFile, maxPromptSize)
		switch {
		case err != nil:
			return usageErrorf("--prompt-file: cannot read %s: %s", o.promptFile, unwrapPathError(err))
		case len(b) > maxPromptSize:
			return usageErrorf("--prompt-file: %s is larger than %d KiB", o.promptFile, maxPromptSize>>10)
		case !utf8.Valid(b):
			return usageErrorf("--prompt-file: %s is not UTF-8", o.promptFile)
		case !strings.Contains(string(b), "{text}"):
			return usageErrorf("--prompt-file: %s has no {text}: the row's text would not be sent", o.promptFile)
		}
		o.prompt = string(b)
	}
	if o.tokenEnv != "" && !envName(o.tokenEnv) {
		return usageErrorf("--token-env %q is not an environment variable name (letters, digits, _)", o.tokenEnv)
	}
	if err := checkConstrain(o.constrain, fs != nil && fs.Changed("constrain"), kind.Chat || strings.HasPrefix(fallback, chatPrefix)); err != nil {
		return err
	}
	if err := inRange("--tpm", o.tpm, 1, maxTPM, "paced by the server's headers"); err != nil {
		return err
	}
	if o.tpm > 0 && !kind.Chat {
		return usageErrorf("--tpm is for --provider chat: only a chat provider reports the tokens it counts (a chat --fallback-model is not paced by it)")
	}
	if given && kind.Endpoint != "" {
		return usageErrorf("--labels is not for --provider %s: its server takes no candidate labels", kind.Name)
	}
	return nil
}

// readBounded reads at most limit+1 bytes of path: enough to tell a file
// over limit, never more, whatever it is (/dev/zero, a FIFO that never
// ends, a file of gigabytes).
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

func envName(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// resolveToken is the token the flags say: from --token-env's variable
// tokenEnv (which must hold one), else as huggingface_hub finds it.
func resolveToken(getenv func(string) string, tokenEnv string) (provider.Token, error) {
	if tokenEnv == "" {
		return provider.ResolveToken(getenv)
	}
	return provider.TokenFromEnv(getenv, tokenEnv)
}

// fallbackKind reads --fallback-model: "local", "chat:MODEL", "hf:MODEL",
// or a model of the primary's kind.
func fallbackKind(fb string, primary provider.Kind) (provider.Kind, string) {
	switch {
	case strings.HasPrefix(fb, chatPrefix):
		k, _ := provider.KindOf("chat")
		return k, strings.TrimSpace(fb[len(chatPrefix):])
	case strings.HasPrefix(fb, hfPrefix):
		k, _ := provider.KindOf("hf")
		return k, strings.TrimSpace(fb[len(hfPrefix):])
	}
	return primary, fb
}

// defaultModelLabels are the labels of provider.DefaultModel: a chat
// fallback behind it answers with them.
var defaultModelLabels = []string{"NEGATIVE", "POSITIVE"}
